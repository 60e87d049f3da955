"""Faults on the indexer alone: a real `photosearch worker` SIGKILLed in the middle of its
batches, twice, and its data directory running out of space while it writes (the sync pauses,
then goes on once space returns).

The data directory is a tmpfs mounted for the test (the machines run tests as root), so the
store meets a real ENOSPC from the kernel, not a simulated one.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobStatus
from core.settings import Settings
from core.sources import LocalSource
from core.submit import queue_sync
from core.vectorstore import LIVE_ALIAS, open_store
from model.triton_server import TritonServer
from tests.support.indexing import (
    WorkerProcess,
    indexer_settings,
    photo_folder,
    tasks,
    wait_job,
    write_photo,
)
from tests.support.redisserver import RedisServer
from tests.support.waiting import wait_until


@pytest.fixture
def settings(tmp_path: Path, triton: TritonServer, repository: Path) -> Iterator[Settings]:
    with indexer_settings(tmp_path / "data", triton.url, repository) as settings:
        yield settings


def listing(root: Path) -> set[str]:
    return {o.key for o in LocalSource(root).list_range()}


def assert_store_holds(settings: Settings, root: Path) -> None:
    """Every photo of the folder once, readable after the worker that wrote them stopped."""
    store = open_store(settings)
    try:
        collection = store.resolve(LIVE_ALIAS)
        ids = [v.photo_id for v in store.points(collection)]
        assert len(ids) == len(set(ids)) == store.count(collection)
        assert set(ids) == listing(root)
        [some] = store.retrieve(collection, [ids[0]], with_vectors=True)
        assert some.vector is not None
        hits = store.search(collection, some.vector, limit=1)
        assert hits[0].photo_id == ids[0]
    finally:
        store.close()


def wait_progress(jobs: Jobs, job_id: str, at_least: int, worker: WorkerProcess) -> int:
    """Until the job has done at_least photos (polled often: a kill is to land mid-job)."""

    def done() -> int | None:
        job = jobs.get(job_id)
        return job.done if job is not None and job.done >= at_least else None

    return wait_until(done, 120, lambda: f"{jobs.get(job_id)}\n{worker.tail()}", every_s=0.01)


def test_a_worker_killed_mid_batch_twice_loses_nothing_and_duplicates_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    photo_folder(root, 120)
    settings.indexer.batch_size = 2
    settings.indexer.visibility_timeout_s = 3  # a dead worker's tasks come back in seconds
    jobs = Jobs.from_settings(settings)
    log = tmp_path / "worker.log"
    job_id = queue_sync(tasks(settings), jobs, str(root))
    seen = 0
    for _ in range(2):
        worker = WorkerProcess(settings, log, concurrency=1).start()
        seen = wait_progress(jobs, job_id, seen + 10, worker)
        worker.kill()  # SIGKILL to its process group: no warm shutdown, no ack
        killed_at = jobs.get(job_id)
        assert killed_at is not None and killed_at.done < 120, "the job ended before the kill"
    with WorkerProcess(settings, log, concurrency=1) as restarted:
        job = wait_job(jobs, job_id, worker=restarted)
    # Counted once each: the batches redelivered after the kills did not count twice.
    assert (job.state, job.done, job.failed, job.skipped, job.total) == ("done", 120, 0, 0, 120)
    assert_store_holds(settings, root)


def wait_supervised(jobs: Jobs, job_id: str, worker: WorkerProcess) -> JobStatus:
    """Until the job has finished, starting the worker again whenever it exits, as compose's
    restart policy, Kubernetes and `photosearch up` do. Celery's consumer usually reconnects
    by itself, but kombu's Redis transport sometimes fails its reconnect with an
    AttributeError ('NoneType' object has no attribute 'hostname') and the worker exits."""

    def finished() -> JobStatus | None:
        job = jobs.get(job_id)
        if job is not None and job.state in FINISHED:
            return job
        if worker.process is not None and worker.process.poll() is not None:
            worker.start()
        return None

    return wait_until(finished, 180, lambda: f"{jobs.get(job_id)}\n{worker.tail()}")


def test_a_worker_s_redis_killed_mid_sync_keeps_the_queued_batches_and_the_worker_goes_on(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    """The queue's Redis as `photosearch up`, compose and Kubernetes run it (append-only file,
    fsync before each reply), SIGKILLed while a worker process runs a sync and started again."""
    redis = RedisServer(tmp_path / "redis", persistent=True)
    redis.start()
    root = tmp_path / "photos"
    photo_folder(root, 120)
    try:
        with indexer_settings(
            tmp_path / "data", triton.url, repository, max_retries=240, retry_backoff_max_s=2
        ) as settings:
            settings.redis.url = redis.url
            settings.indexer.batch_size = 2
            settings.indexer.visibility_timeout_s = 3  # what a worker that exited held returns
            jobs = Jobs.from_settings(settings)
            worker = WorkerProcess(settings, tmp_path / "worker.log").start()
            job_id = queue_sync(tasks(settings), jobs, str(root))
            wait_progress(jobs, job_id, 10, worker)
            redis.stop()
            # Down until the worker has seen it: its consumer's connection failed.
            worker.wait_logged("Connection to broker lost", 60)
            redis.start()
            jobs = Jobs.from_settings(settings)  # the test's own connection died too
            job = wait_supervised(jobs, job_id, worker)
            assert (job.state, job.done, job.failed, job.total) == ("done", 120, 0, 120), job
            # And it runs new work: a new sync after the restart.
            for i in range(200, 204):
                write_photo(root / f"late/photo{i}.jpg", i)
            again = wait_supervised(jobs, queue_sync(tasks(settings), jobs, str(root)), worker)
            assert (again.state, again.done, again.failed) == ("done", 4, 0), again
            worker.stop()
            assert_store_holds(settings, root)
    finally:
        redis.stop()


class Tmpfs:
    """A tmpfs mounted on a folder, and a filler file that takes all of its free space."""

    def __init__(self, folder: Path, size_mb: int) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        assert mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr}"
        self.filler = folder / "filler"

    def fill(self) -> None:
        """Write until the kernel says ENOSPC: the next write of anyone fails."""
        # Unbuffered: a buffered file would raise ENOSPC again when closed.
        with self.filler.open("wb", buffering=0) as out:
            for chunk in (1 << 20, 1 << 12, 1):
                try:
                    while True:
                        out.write(b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        assert self.free() < 4096

    def free(self) -> int:
        stat = os.statvfs(self.folder)
        return stat.f_bavail * stat.f_frsize

    def release(self) -> None:
        self.filler.unlink()

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.folder)], check=False)


def test_a_full_data_disk_pauses_the_sync_clearly_and_it_goes_on_once_freed(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    # The store's files are mapped, and sparse: ~250 MB of them (the WAL's 64 MB, 185 MB of
    # payload index files since the search features' 21 indexes) where ~15 MB is written. A
    # tmpfs backs a touched page of a mapping with memory, so one smaller than the files
    # killed the process that reopened the store with SIGBUS; a disk does not.
    disk = Tmpfs(tmp_path / "data", 512)
    root = tmp_path / "photos"
    photo_folder(root, 8)
    try:
        # Few retries: the test wants the final outcome of a disk that stays full.
        with indexer_settings(
            disk.folder, triton.url, repository, max_retries=2, retry_backoff_max_s=1
        ) as settings:
            settings.qdrant.min_free_mb = 16  # of the 512 MB; the store writes ~15 MB
            jobs = Jobs.from_settings(settings)
            log = tmp_path / "worker.log"
            with WorkerProcess(settings, log) as worker:
                first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
                assert (first.state, first.done) == ("done", 8), first

                disk.fill()
                for i in range(8, 40):
                    write_photo(root / f"late/photo{i:03d}.jpg", i)
                sync_id = queue_sync(tasks(settings), jobs, str(root))
                # Past the retries the sync pauses and says why; no photo is counted failed.
                full = wait_job(jobs, sync_id, worker=worker, until=lambda j: j.state == "paused")
                assert (full.done, full.failed) == (0, 0), full
                assert "did not answer past the retry budget" in full.message, full
                assert "No space left on device" in full.message, full

                disk.release()
                again = wait_job(jobs, sync_id, worker=worker)
                assert (again.state, again.done, again.failed) == ("done", 32, 0), again
                problems = "\n".join(jobs.problems(sync_id))
                assert "paused" in problems and "No space left on device" in problems, problems
            assert worker.process is not None and worker.process.returncode == 0, worker.tail()
            # Reopened from disk: the first photos and the late ones, each once.
            assert_store_holds(settings, root)
    finally:
        disk.unmount()
