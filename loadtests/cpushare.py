"""Where the CPU goes under load: each process's share of the machine over a phase (psutil's
CPU times), and what the API's Python does with its share (py-spy's samples, summed by function).

The load generator counts itself: on two cores a generator that takes half a core is part of
what the figures measure, and a reader of them must see it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.machine import ROOT
from harness.processes import descendants

# A process's role, from its command line: the first pattern it contains names it.
ROLES = (
    ("clip_text", "Triton stub: text"),
    ("clip_image", "Triton stub: image"),
    ("tritonserver", "Triton server"),
    ("serve-embedded", "API"),
    ("query_api", "API"),
    ("celery", "indexer worker"),
    ("redis-server", "Redis"),
    ("valkey", "Redis"),
    ("photosearch up", "up (supervisor)"),
)
GENERATOR = "load generator"


def role_of(cmdline: Iterable[str]) -> str:
    line = " ".join(cmdline)
    return next((role for pattern, role in ROLES if pattern in line), "other")


@dataclass(frozen=True)
class CpuTimes:
    """Each process's user + system CPU seconds at one moment, by pid, with its role."""

    seconds: Mapping[int, tuple[str, float]]
    wall: float

    @classmethod
    def of(cls, root: int) -> CpuTimes:
        seconds: dict[int, tuple[str, float]] = {}
        for pid in {root, *descendants(root)}:
            try:
                process = psutil.Process(pid)
                t = process.cpu_times()
                seconds[pid] = (role_of(process.cmdline()), t.user + t.system)
            except psutil.Error:  # gone between the listing and the read
                continue
        mine = psutil.Process(os.getpid()).cpu_times()
        seconds[os.getpid()] = (GENERATOR, mine.user + mine.system)
        return cls(seconds, time.monotonic())


def cores_by_role(before: CpuTimes, after: CpuTimes) -> dict[str, float]:
    """Cores each role used between two readings (1.0 = one core busy all along), busiest first;
    a process that started in between counts from zero."""
    wall = max(after.wall - before.wall, 1e-9)
    used: dict[str, float] = {}
    for pid, (role, seconds) in after.seconds.items():
        used[role] = used.get(role, 0.0) + seconds - before.seconds.get(pid, (role, 0.0))[1]
    return {role: round(s / wall, 3) for role, s in sorted(used.items(), key=lambda x: -x[1])}


def find(root: int, role: str) -> list[int]:
    """The pids below `root` in `role`."""
    return [pid for pid, (r, _) in CpuTimes.of(root).seconds.items() if r == role]


class Sampler:
    """py-spy sampling one process for `seconds` (`--nonblocking`: the process is never paused,
    so the figures under load are the load's), its raw stacks written to `out`."""

    def __init__(self, pid: int, seconds: float, out: Path, rate: int = 100) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.out = out
        self.process = subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
             "--rate", str(rate), "--format", "raw", "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def finish(self) -> list[str]:
        """The raw stacks, once py-spy has written them; none when it could not attach (not
        permitted, say)."""
        self.process.wait()
        if not self.out.exists():
            return []
        return self.out.read_text().splitlines()


PROJECT = ("query_api/", "core/", "model/", "indexer/")


def self_time(lines: Iterable[str], within: tuple[str, ...] = ()) -> dict[str, int]:
    """py-spy's raw (collapsed) stacks, `frame;frame;... count`, summed by their innermost
    frame (`function (file)`, without the line, so one function is one row); with `within`,
    by the innermost frame whose file is under one of those folders (which of our functions
    the time is spent below), and stacks with no such frame as "(elsewhere)"."""
    counts: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame(f) for f in stack.split(";")]
        if within:
            ours = [f for f in frames if any(f"({w}" in f or f"/{w}" in f for w in within)]
            frames = ours or ["(elsewhere)"]
        counts[frames[-1]] += int(count)
    return dict(counts.most_common())


def _frame(raw: str) -> str:
    function, _, where = raw.partition(" (")
    file = where.split(":", 1)[0].rstrip(")")
    for marker in ("site-packages/", f"{ROOT}/"):
        file = file.split(marker, 1)[-1]
    return f"{function} ({file})"


def table(
    by_role: Mapping[str, Mapping[str, float]], cores: int, rates: Mapping[str, float]
) -> list[str]:
    """Markdown: a row per phase, a column per role, in cores, and the machine's idle rest;
    then the same as CPU milliseconds per search sent (`rates`: each phase's searches/s), the
    figure that says how many searches/s the machine's cores could hold at most."""
    roles = sorted({r for row in by_role.values() for r in row}, key=lambda r: r == GENERATOR)
    lines = [
        "| phase | " + " | ".join(roles) + " | all | idle |",
        "|---|" + "---:|" * (len(roles) + 2),
    ]
    for phase, row in by_role.items():
        total = sum(row.values())
        cells = [f"{row.get(r, 0.0):.2f}" for r in roles]
        idle = max(0.0, cores - total)
        lines.append(f"| {phase} | " + " | ".join(cells) + f" | {total:.2f} | {idle:.2f} |")
    lines += [
        "",
        "| phase, CPU ms per search | "
        + " | ".join(roles)
        + " | all | searches/s the cores hold |",
        "|---|" + "---:|" * (len(roles) + 2),
    ]
    for phase, row in by_role.items():
        rate = rates[phase]
        ms = {r: row.get(r, 0.0) * 1000 / rate for r in roles}
        total = sum(ms.values())
        cells = [f"{ms[r]:.1f}" for r in roles]
        most = cores * 1000 / total if total else float("inf")
        lines.append(f"| {phase} | " + " | ".join(cells) + f" | {total:.1f} | {most:.0f} |")
    return lines


def top(samples: Mapping[str, int], count: int) -> list[str]:
    """Markdown: the functions with the most samples, each with its share of them."""
    total = sum(samples.values()) or 1
    lines = ["| function (file) | samples | share |", "|---|---:|---:|"]
    for name, n in list(samples.items())[:count]:
        lines.append(f"| `{name}` | {n} | {n / total:.1%} |")
    return lines
