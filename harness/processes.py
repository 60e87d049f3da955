"""Processes on free ports: the API, a worker, a Redis, as `photosearch up`'s own `Child`
(a command, its log, a readiness probe, a stop that leaves nothing behind), and their memory.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psutil
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobStatus
from core.settings import Settings
from core.submit import queue_sync
from core.taskqueue import create_celery
from model.triton_server import Ports
from photosearch.up.probes import http_ok, redis_process_id
from photosearch.up.processes import Child, redis_binary


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


def own_redis(stack: ExitStack, work: Path, given: str | None, prefix: str) -> str:
    """The API's Redis: `given` (its keys under `prefix` deleted at the end), else a Redis of
    this run's own in `work`, stopped at the end. Returns its URL."""
    if given is None:
        child, url = redis_process(work)
        stack.enter_context(running(child))
        return url

    def delete() -> None:
        redis = Redis.from_url(given)
        keys = list(redis.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            redis.delete(*keys[start : start + 1000])
        redis.close()
        print(f"deleted {len(keys)} Redis keys of {prefix}", flush=True)

    stack.callback(delete)
    return given


# -- what they hold (psutil) ---------------------------------------------------------------------


def descendants(pid: int) -> set[int]:
    """Every process below pid (grandchildren too: Triton's backend stubs)."""
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def rss_bytes(pid: int) -> int:
    """The resident memory of one process; 0 once it is gone."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


def rss_mib(pids: set[int]) -> float:
    return sum(rss_bytes(pid) for pid in pids) / 1024**2


def peak_rss_bytes(pid: int) -> int:
    """The resident memory's high-water mark since the process started or `reset_peak_rss`;
    0 once it is gone. psutil has no high-water mark: the kernel's status file has it."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    line = next((s for s in lines if s.startswith("VmHWM:")), "")
    return int(line.split()[1]) * 1024 if line else 0


def reset_peak_rss(pid: int) -> None:
    """Lower the high-water mark of `peak_rss_bytes` to the resident memory now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
