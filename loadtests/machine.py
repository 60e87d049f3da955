"""Where a figure was measured: the machine and the commit, for reports and docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return None


def _gpu() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return ", ".join(out.splitlines()) or "none"


def machine() -> str:
    """One line: CPU model, the cores this process may use, memory, GPU."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = _memory_gib()
    ram = f"{memory:.0f} GiB" if memory is not None else "? GiB"
    return f"{_cpu_model()}, {cores} cores, {ram} RAM, GPU: {_gpu()}"


def commit() -> str:
    """The short commit hash, with +dirty when the working tree has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


@dataclass(frozen=True)
class Occasion:
    """When, where and from what the figures were measured, taken before the first one: the
    commit is the code that ran, even when HEAD moves on during a long run."""

    command: str
    started: datetime
    load: float  # the 1-minute load average
    commit: str
    machine: str

    @classmethod
    def now(cls, command: str) -> Occasion:
        return cls(command, datetime.now(UTC), os.getloadavg()[0], commit(), machine())
