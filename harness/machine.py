"""The machine and the code the figures come from: CPU, memory, commit, for reports and docs."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def _cpu() -> str:
    # psutil does not name the CPU; the kernel's cpuinfo does.
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    named = (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    return next(named, "") or platform.processor() or platform.machine()


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
    cores = len(psutil.Process().cpu_affinity() or [])
    ram = psutil.virtual_memory().total / 1024**3
    return f"{_cpu()}, {cores} cores, {ram:.0f} GiB RAM, GPU: {_gpu()}"


def commit() -> str:
    """The short commit hash, with +dirty when the working tree has uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

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
