"""The machine the figures come from (CPU, memory, commit, for reports and docs/benchmarks.md),
and the processes the benchmarks start on it: the API, a worker, a Redis, on free ports.

The processes are `photosearch up`'s own `Child` (a command, its log, a readiness probe, a stop
that leaves nothing behind); nothing here comes from the tests.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.jobs import Jobs, JobStatus
from core.settings import Settings
from core.submit import queue_sync
from core.taskqueue import create_celery
from model.triton_server import Ports
from photosearch.up.probes import http_ok, redis_process_id
from photosearch.up.processes import Child, redis_binary

ROOT = Path(__file__).resolve().parent.parent


def _first(path: str, prefix: str) -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), None)


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
    cpu = _first("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    memory = _first("/proc/meminfo", "MemTotal:")
    ram = f"{int(memory.split()[0]) / 1024**2:.0f} GiB" if memory else "? GiB"
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores, {ram} RAM, GPU: {_gpu()}"


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


# -- processes --------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """Distinct ports the kernel just handed out (held together, then let go)."""
    with ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def triton_ports() -> Ports:
    http, grpc, metrics = free_ports(3)
    return Ports(http=http, grpc=grpc, metrics=metrics)


def environment(values: Mapping[str, Any], prefix: str = "PHOTOSEARCH_") -> dict[str, str]:
    """Settings given as nested values ({"indexer": {"batch_size": 64}}) as the PHOTOSEARCH_*
    variables a process reads them from."""
    env: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key.upper()}"
        env |= environment(value, name + "__") if isinstance(value, Mapping) else {name: str(value)}
    return env


def bench_settings(
    data_dir: Path, triton_url: str, repository: Path, redis_url: str, **indexer: object
) -> dict[str, Any]:
    """The settings of one benchmark step as nested values (`Settings(**values)` here,
    `process_env(values)` for a worker): its own data folder, Redis key prefix and queues, and
    no worker metrics port (workers of several steps must not collide)."""
    return {
        "data_dir": data_dir,
        "triton": {"url": triton_url},
        "model": {"repository": repository},
        "redis": {"url": redis_url, "prefix": f"bench-{uuid.uuid4().hex[:8]}"},
        "indexer": {"retry_backoff_max_s": 2, "max_retries": 3, "metrics_port": 0, **indexer},
    }


def process_env(values: Mapping[str, Any]) -> dict[str, str]:
    """This process's environment without its PHOTOSEARCH_*, and the settings `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    return env | environment(values)


@contextmanager
def running(child: Child) -> Iterator[Child]:
    """The child started and ready, and stopped on the way out (SIGTERM, then SIGKILL)."""
    child.start()
    try:
        yield child
    finally:
        child.stop()


def api_process(env: dict[str, str], port: int, log: Path, log_level: str) -> Child:
    """`photosearch api serve` on 127.0.0.1:port, ready when /readyz answers 200."""
    command = [*(sys.executable, "-m", "photosearch", "api", "serve", "--host", "127.0.0.1")]
    command += ["--port", str(port), "--log-level", log_level]
    ready = f"http://127.0.0.1:{port}/readyz"
    return Child("api", command, log, env=env, ready=lambda: http_ok(ready), startup_timeout_s=120)


def worker_process(
    env: dict[str, str], log: Path, concurrency: int = 2, stop_timeout_s: float = 60
) -> Child:
    """`photosearch worker`, ready once it logs that it is."""
    command = [sys.executable, "-m", "photosearch", "worker", f"--concurrency={concurrency}"]
    offset = log.stat().st_size if log.exists() else 0

    def ready() -> bool:
        return b" ready." in log.read_bytes()[offset:]

    return Child("worker", command, log, env=env, ready=ready, stop_timeout_s=stop_timeout_s)


def sync_folder(values: Mapping[str, Any], folder: Path, log: Path, timeout_s: float) -> JobStatus:
    """A full sync of `folder` into the store of the settings `values`, by a worker started
    for it and stopped after: the finished job (AssertionError unless every photo was done)."""
    settings = Settings(**values)
    jobs, app = Jobs.from_settings(settings), create_celery(settings)
    try:
        with running(worker_process(process_env(values), log)):
            job = jobs.wait(queue_sync(app, jobs, str(folder)), timeout_s=timeout_s)
    finally:
        app.close()
    assert job is not None and job.state == "done" and job.failed == 0, job
    return job


def redis_process(folder: Path) -> tuple[Child, str]:
    """A Redis of its own that keeps nothing on disk, and its URL."""
    (port,) = free_ports(1)
    command = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(folder)]
    child = Child(
        "redis", command, folder / "redis.log", ready=lambda: bool(redis_process_id(port))
    )
    return child, f"redis://127.0.0.1:{port}/0"


def descendants(pid: int) -> set[int]:
    """Every process below pid, from /proc (grandchildren too: Triton's backend stubs)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(parent_of(stat.read_text()), []).append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    found: set[int] = set()
    todo = [pid]
    while todo:
        found.update(new := children.get(todo.pop(), []))
        todo += new
    return found


def parent_of(stat: str) -> int:
    """The parent pid in a /proc/PID/stat line (after the command, which may hold spaces)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def proc(pid: int, name: str) -> str:
    """/proc/PID/NAME as text, NULs as spaces; "" once the process is gone."""
    try:
        return (Path("/proc") / str(pid) / name).read_text().replace("\0", " ").strip()
    except OSError:
        return ""


def status_kib(pid: int, field: str) -> int:
    """A memory field of /proc/PID/status (VmRSS, VmHWM) in KiB; 0 once the process is gone
    (a zombie has no memory fields)."""
    line = next((s for s in proc(pid, "status").splitlines() if s.startswith(field + ":")), "")
    return int(line.split()[1]) if line else 0


def rss_mib(pids: set[int]) -> float:
    return sum(status_kib(pid, "VmRSS") for pid in pids) / 1024


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    stat = proc(pid, "stat")
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"
