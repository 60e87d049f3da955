"""Helpers of the indexer tests: photo folders, a real `photosearch worker` process, job waits."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import httpx
import pytest
from PIL import Image
from redis import Redis

from core.deployment import mark
from core.jobs import Jobs
from core.jobstatus import FINISHED, JobStatus, job_status
from core.settings import Settings, get_settings
from core.taskqueue import TaskApp, create_celery
from tests.support.images import encode, photo
from tests.support.redisserver import session_url
from tests.support.waiting import wait_until

NAMES = ("astronaut", "chelsea", "coffee", "rocket", "camera", "coins", "moon", "hubble_deep_field")
FORMATS = {".jpg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".gif": "GIF", ".tiff": "TIFF"}
WORKER = [sys.executable, "-m", "photosearch", "worker"]


def variant(i: int, size: int = 128) -> Image.Image:
    """A distinct real-photo image: photo i mod 8, a crop that moves with i, flipped on odd i."""
    image = photo(NAMES[i % len(NAMES)]).convert("RGB")
    w, h = image.size
    step = i // len(NAMES)
    left, top = (step * 37) % (w // 3), (step * 23) % (h // 3)
    image = image.crop((left, top, left + 2 * w // 3, top + 2 * h // 3)).resize((size, size))
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if i % 2 else image


def write_photo(path: Path, i: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(variant(i), FORMATS[path.suffix]))


def photo_folder(root: Path, count: int) -> dict[str, int]:
    """count photos in two sub-folders and several formats; returns key -> variant."""
    keys = {}
    suffixes = list(FORMATS)
    for i in range(count):
        key = f"{'day1' if i % 2 else 'day2'}/photo{i:03d}{suffixes[i % len(suffixes)]}"
        write_photo(root / key, i)
        keys[key] = i
    return keys


def write_manifest(root: Path, rows: list[dict[str, object]]) -> None:
    (root / "photos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def settings_for(data_dir: Path, triton_url: str, repository: Path, **indexer: object) -> Settings:
    """Settings of one test: its own data folder, Redis key prefix and queues, on the
    session's Redis."""
    return make_settings(data_dir, triton_url, repository, indexer=indexer)


def make_settings(
    data_dir: Path,
    triton_url: str,
    repository: Path,
    *,
    redis_url: str | None = None,
    indexer: Mapping[str, object] | None = None,
    api: Mapping[str, object] | None = None,
) -> Settings:
    """settings_for with these API settings, on the session's Redis unless `redis_url`
    names another."""
    return Settings(
        data_dir=data_dir,
        triton={"url": triton_url},
        model={"repository": repository},
        redis={"url": redis_url or session_url(), "prefix": f"pstest-{uuid.uuid4().hex[:8]}"},
        # No worker metrics port unless a test asks: workers of several tests must not collide.
        indexer={
            **{"batch_size": 4, "retry_backoff_max_s": 2, "max_retries": 3, "metrics_port": 0},
            **(indexer or {}),
        },
        api=dict(api or {}),
    )


@contextmanager
def indexer_settings(
    data_dir: Path, triton_url: str, repository: Path, **indexer: object
) -> Iterator[Settings]:
    """settings_for, and the test's Redis keys deleted afterwards."""
    settings = settings_for(data_dir, triton_url, repository, **indexer)
    try:
        yield settings
    finally:
        drop_keys(settings)


_PUBLISHERS: dict[tuple[str, str], TaskApp] = {}


def tasks(settings: Settings) -> TaskApp:
    """The Celery app a test sends its tasks with, to its own queues: one per Redis and key
    prefix, closed by drop_keys."""
    key = (settings.redis.url, settings.redis.prefix)
    if key not in _PUBLISHERS:
        _PUBLISHERS[key] = create_celery(settings)
    return _PUBLISHERS[key]


def marked_prefix(redis: Redis, environ: pytest.MonkeyPatch) -> Iterator[str]:
    """The commands' settings (get_settings) under a Redis key prefix of the test's own, on
    the session's Redis, marked PhotoSearch's as a worker's start marks it; its keys deleted
    afterwards. A fixture's body: `yield from marked_prefix(redis, monkeypatch)`."""
    name = f"unit-{uuid.uuid4().hex}"
    environ.setenv("PHOTOSEARCH_REDIS__PREFIX", name)
    get_settings.cache_clear()
    mark(redis, name, "worker")
    yield name
    environ.undo()
    get_settings.cache_clear()
    keys = list(redis.scan_iter(f"{name}*"))
    if keys:
        redis.delete(*keys)


def drop_keys(settings: Settings) -> None:
    """Delete every Redis key of one test's prefix (jobs, cache, queues)."""
    publisher = _PUBLISHERS.pop((settings.redis.url, settings.redis.prefix), None)
    if publisher is not None:
        publisher.close()
    redis = Redis.from_url(settings.redis.url)
    keys = list(redis.scan_iter(f"{settings.redis.prefix}*"))
    if keys:
        redis.delete(*keys)
    redis.close()


def env_of(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The same settings as PHOTOSEARCH_ variables, for a worker process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    env |= {
        "PHOTOSEARCH_DATA_DIR": str(settings.data_dir),
        "PHOTOSEARCH_TRITON__URL": settings.triton.url,
        "PHOTOSEARCH_MODEL__REPOSITORY": str(settings.repository),
        "PHOTOSEARCH_REDIS__URL": settings.redis.url,
        "PHOTOSEARCH_REDIS__PREFIX": settings.redis.prefix,
    }
    for name, value in settings.indexer.model_dump().items():
        if value is not None and not isinstance(value, tuple):
            env[f"PHOTOSEARCH_INDEXER__{name.upper()}"] = str(value)
    # Not the store's path: it follows DATA_DIR, which callers change for each process.
    for name, value in settings.qdrant.model_dump(exclude={"path"}).items():
        if value is not None:
            env[f"PHOTOSEARCH_QDRANT__{name.upper()}"] = str(value)
    for name, value in settings.s3.model_dump().items():
        if value is not None:
            env[f"PHOTOSEARCH_S3__{name.upper()}"] = str(value)
    return env | dict(extra or {})


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`photosearch ARGS` in a process of its own, with these settings.

    The test's Redis is marked PhotoSearch's first, as a deployment's is once its worker or
    `up` has started: some tests ask before any worker runs (the refusal of a Redis without
    the mark has tests of its own: tests/unit/indexer/test_cli.py, test_cli_redis.py).
    """
    redis = Redis.from_url(settings.redis.url)
    try:
        mark(redis, settings.redis.prefix, "tests")
    finally:
        redis.close()
    return subprocess.run(
        [sys.executable, "-m", "photosearch", *args],
        env=env_of(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


class WorkerProcess:
    """`photosearch worker` in its own process group, logging to a file."""

    def __init__(
        self,
        settings: Settings,
        log: Path,
        concurrency: int = 2,
        queues: list[str] | None = None,
        name: str = "photosearch",
        stop_timeout_s: float = 60,
    ) -> None:
        self.settings = settings
        self.stop_timeout_s = stop_timeout_s
        self.log = log
        self.concurrency = concurrency
        self.queues = queues
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "photosearch",
                    "worker",
                    f"--concurrency={self.concurrency}",
                    *([f"--queues={','.join(self.queues)}"] if self.queues else []),
                    f"--name={self.name}",
                ],
                env=env_of(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"worker did not start:\n{self.tail()}")
            return b" ready." in self.log.read_bytes()[offset:]

        wait_until(ready, 120, lambda: f"the worker ready:\n{self.tail()}")
        return self

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_logged(self, pattern: str, timeout_s: float = 120) -> re.Match[str]:
        """The first match of a regular expression in the log, once the worker has written
        it. Past timeout_s (a ceiling that only bounds a hang), an AssertionError."""
        return wait_until(
            lambda: re.search(pattern, self.log.read_text(errors="replace")),
            timeout_s,
            lambda: f"{pattern!r} in the log:\n{self.tail()}",
        )

    def stop(self) -> int:
        """Warm shutdown (SIGTERM): tasks in flight finish, the store is closed. A worker
        still running past stop_timeout_s is killed, and that is an error."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"worker still running {self.stop_timeout_s:.0f} s after SIGTERM:\n{self.tail()}"
            ) from None

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


class JobRecords(Protocol):
    """Where a test reads jobs: `Jobs` (their Redis records) or `ApiJobs` (the admin API)."""

    def get(self, job_id: str) -> JobStatus | None: ...


class ApiJobs:
    """Job records as an operator reads them, through GET /v1/admin/jobs/ID; None while the
    API cannot tell (it is down, or its Redis is)."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self.url = url.rstrip("/")
        self.headers = dict(headers)

    def get(self, job_id: str) -> JobStatus | None:
        try:
            response = httpx.get(
                f"{self.url}/v1/admin/jobs/{job_id}", headers=self.headers, timeout=30
            )
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        data = response.json()
        # The record keeps the quality gate's figures as JSON text; the API shows them parsed.
        data["quality"] = json.dumps(data["quality"]) if data.get("quality") else ""
        return job_status(data)


class Logged(Protocol):
    """A process whose log a failed wait shows: a WorkerProcess, or `photosearch up`."""

    def tail(self) -> str: ...


def wait_job(
    jobs: JobRecords,
    job_id: str,
    timeout_s: float = 120,
    worker: Logged | None = None,
    *,
    until: Callable[[JobStatus], bool] | None = None,
) -> JobStatus:
    """Until the job has finished (core.jobstatus.FINISHED), or `until(job)` holds: the record
    then. Past timeout_s, an AssertionError with the last record read and the worker's log."""
    last: list[JobStatus] = []

    def there() -> JobStatus | None:
        job = jobs.get(job_id)
        if job is None:
            return None
        last[:] = [job]
        return job if (until(job) if until else job.state in FINISHED) else None

    def said() -> str:
        return f"job {job_id} there: {last[0] if last else None}\n{worker.tail() if worker else ''}"

    return wait_until(there, timeout_s, said)


def wait_idle(jobs: Jobs, timeout_s: float = 120) -> None:
    """Until every job (the follow-up sync after a switch too) has finished."""
    wait_until(
        lambda: all(job.state in FINISHED for job in jobs.recent(50)),
        timeout_s,
        lambda: f"every job finished: {jobs.recent(50)}",
    )
