"""A nightly job through an outage and behind another job: a sync and an increment whose
Triton is stopped past their retry budget pause (their record says why) and finish with every
photo once it is started again; while the sync is paused it keeps the live collection, so an
increment asked for meanwhile waits in line; an increment asked for while a sync runs starts
once the sync has ended. Real worker processes, Redis and Triton; nothing waits on a clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.settings import Settings
from core.sources import LocalSource
from core.submit import queue_sync, submit_sync
from core.vectorstore import LIVE_ALIAS, open_store
from harness.processes import triton_ports
from model.triton_server import TritonServer
from tests.support.indexing import (
    WorkerProcess,
    indexer_settings,
    photo_folder,
    tasks,
    wait_job,
    write_photo,
)

PHOTOS = 12
BATCH = 4


@pytest.fixture(scope="module")
def own_triton(
    repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    """A Triton of this module's own, which its tests stop and start."""
    with TritonServer(repository, triton_ports(), tmp_path_factory.mktemp("triton")) as server:
        yield server


@pytest.fixture
def stoppable(own_triton: TritonServer) -> Iterator[TritonServer]:
    """The module's Triton, up for this test and again after it."""
    if not own_triton.is_ready():
        own_triton.start()
    yield own_triton
    if not own_triton.is_ready():
        own_triton.start()


def outage_settings(
    tmp_path: Path, triton: TritonServer, repository: Path
) -> AbstractContextManager[Settings]:
    """A retry budget of seconds, nudges every few seconds that ask Triton again, a feed."""
    return indexer_settings(
        tmp_path / "data",
        triton.url,
        repository,
        batch_size=BATCH,
        max_retries=2,
        retry_backoff_max_s=1,
        visibility_timeout_s=5,
        feed=(tmp_path / "changes.log").as_uri(),
    )


def stored(settings: Settings) -> set[str]:
    """The photos the live collection holds (read with the worker stopped)."""
    store = open_store(settings)
    try:
        return {p.photo_id for p in store.points(store.resolve(LIVE_ALIAS))}
    finally:
        store.close()


def in_source(root: Path) -> set[str]:
    return {o.key for o in LocalSource(root).list_range()}


def paused_by_triton(jobs: Jobs, job_id: str, worker: WorkerProcess) -> JobStatus:
    # Paused, or ended (failed, a wrong outcome said at once rather than at the ceiling).
    job = wait_job(
        jobs, job_id, worker=worker, until=lambda j: j.state in (JobState.PAUSED, *FINISHED)
    )
    assert job.state == JobState.PAUSED, job
    assert "Triton did not answer past the retry budget" in job.message, job
    assert job.failed == 0 and job.resume_state == JobState.RUNNING, job
    return job


def went_on_after_a_pause(jobs: Jobs, job: JobStatus) -> None:
    """The job's problems say how long it was paused, and why."""
    problems = jobs.problems(job.id)
    assert any(p.startswith("paused ") and "Triton" in p for p in problems), problems


def test_a_sync_and_an_increment_paused_by_a_triton_outage_finish_when_it_returns(
    stoppable: TritonServer, repository: Path, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    photo_folder(root, PHOTOS)
    journal = tmp_path / "changes.log"
    journal.touch()
    with outage_settings(tmp_path, stoppable, repository) as settings:
        jobs = Jobs.from_settings(settings)
        app = tasks(settings)
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            stoppable.stop()  # SIGTERM: Triton is gone until started again
            sync_id = queue_sync(app, jobs, str(root))
            paused_by_triton(jobs, sync_id, worker)
            # Paused, the sync still holds the live collection: an increment waits in line
            # behind it, another sync is refused.
            waiting = submit_sync(app, jobs, str(root), JobKind.INCREMENT)
            assert waiting.queued, waiting
            elsewhere = submit_sync(app, jobs, str(tmp_path / "elsewhere"))
            assert elsewhere.refused.startswith(f"sync job {sync_id} is changing"), elsewhere

            stoppable.start()
            sync = wait_job(jobs, sync_id, worker=worker)
            assert (sync.state, sync.done, sync.failed) == (JobState.DONE, PHOTOS, 0), sync
            went_on_after_a_pause(jobs, sync)
            after = wait_job(jobs, waiting.job_id, worker=worker)
            assert after.state == JobState.DONE and after.started_at >= sync.finished_at, after

            # New photos, told by the feed; Triton stops before the increment asks it.
            added = ["late/a.jpg", "late/b.jpg", "late/c.jpg", "late/d.jpg", "late/e.jpg"]
            for n, key in enumerate(added):
                write_photo(root / key, 100 + n)
            journal.write_text("".join(f"{key}\n" for key in added))
            stoppable.stop()
            increment_id = submit_sync(app, jobs, str(root), JobKind.INCREMENT).job_id
            paused_by_triton(jobs, increment_id, worker)
            stoppable.start()
            increment = wait_job(jobs, increment_id, worker=worker)
            assert (increment.state, increment.done, increment.failed) == (
                JobState.DONE,
                len(added),
                0,
            ), increment
            went_on_after_a_pause(jobs, increment)
        assert worker.process is not None and worker.process.returncode == 0, worker.tail()
        assert stored(settings) == in_source(root)
        assert len(in_source(root)) == PHOTOS + len(added)


def test_an_increment_asked_for_during_a_sync_runs_after_it(
    stoppable: TritonServer, repository: Path, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    told = next(iter(photo_folder(root, PHOTOS)))  # the feed tells of one, unchanged
    (tmp_path / "changes.log").write_text(f"{told}\n")
    with outage_settings(tmp_path, stoppable, repository) as settings:
        jobs = Jobs.from_settings(settings)
        app = tasks(settings)
        # Asked before any worker runs: the sync holds the live collection from its request.
        sync_id = queue_sync(app, jobs, str(root))
        submitted = submit_sync(app, jobs, str(root), JobKind.INCREMENT)
        assert submitted.queued and not (submitted.joined or submitted.refused), submitted
        queued = jobs.get(submitted.job_id)
        assert queued is not None and queued.state == JobState.QUEUED, queued
        assert queued.message == f"waits for sync job {sync_id} to finish with the live collection"
        # Asked again, the same increment is joined in line, not queued twice.
        again = submit_sync(app, jobs, str(root), JobKind.INCREMENT)
        assert (again.job_id, again.joined) == (submitted.job_id, True), again
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            sync = wait_job(jobs, sync_id, worker=worker)
            increment = wait_job(jobs, submitted.job_id, worker=worker)
        assert (sync.state, sync.done) == (JobState.DONE, PHOTOS), sync
        assert increment.state == JobState.DONE and increment.listed == 1, increment
        assert sync.finished_at <= increment.started_at, (sync, increment)
        assert [j.id for j in jobs.recent()] == [submitted.job_id, sync_id]
