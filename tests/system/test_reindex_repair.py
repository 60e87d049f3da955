"""A reindex while the source changes unannounced: photos written, overwritten and deleted in
the folder with no sync or increment to say so (a bucket whose events come late or never).

The verification before the switch finds the new collection differs from the live one where
the source changed a key after its shard was listed; it replays those keys, verifies again
and switches, counting the repairs; the live collection it retires replays them before a
rollback makes it live again. A photo removed from the new collection behind its back is
no such change: the job fails, naming it.

The test owns the Qdrant Edge store and runs the worker on its threads (tests/system/
test_reindex.py says why); every task travels through the real Redis queue to the real Triton.
An experiment on the new collection holds its switch while the test changes the source, so
the changes land after the load listed and embedded every shard, and before the verification.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.experiments import Experiment, end, start
from core.jobs import Jobs
from core.jobstatus import JobPhase, JobState, JobStatus
from core.settings import Settings
from core.sources import LocalSource, check_source
from core.submit import queue_sync, submit_reindex, submit_rollback
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, open_store
from indexer.app import create_app
from indexer.cli.status import describe
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.indexing import (
    drop_keys,
    photo_folder,
    settings_for,
    tasks,
    wait_idle,
    wait_job,
    write_photo,
)


def held(store: VectorStore, collection: str) -> dict[str, str]:
    """Key -> content version of every photo the collection holds."""
    return {p.key: p.content_version for p in store.points(collection)}


def in_source(root: Path) -> dict[str, str]:
    return {o.key: o.version for o in LocalSource(root).list_range()}


@dataclass
class Held:
    """A reindex whose load has ended, held in its catch-up by an experiment."""

    settings: Settings
    jobs: Jobs
    store: VectorStore
    runtime: Runtime
    root: Path
    keys: list[str]
    live: str
    job: JobStatus
    hold: Experiment

    def release(self) -> JobStatus:
        """End the experiment with "switch": the reindex verifies; its record once finished."""
        end(self.jobs.redis, self.settings.redis.prefix, self.hold.id, "switch", by="admin")
        return wait_job(self.jobs, self.job.id, 300)


@contextmanager
def held_reindex(
    two_versions: tuple[Path, TritonServer],
    tmp_path: Path,
    before: Callable[[Path, list[str]], None] = lambda root, keys: None,
) -> Iterator[Held]:
    """24 photos synced with version 1, `before(root, keys)` changes the folder unannounced,
    then a reindex to version 2 held after its load; the worker runs on every queue until
    the block ends."""
    repo, server = two_versions
    settings = settings_for(
        tmp_path / "data",
        server.url,
        repo,
        model_version=1,
        shard_size=10,  # three shards
        visibility_timeout_s=5,  # nudges every 5 s
        verify_samples=100,  # every shard's keys are compared, not a sample of them
    )
    jobs = Jobs.from_settings(settings)
    root = tmp_path / "photos"
    keys = sorted(photo_folder(root, 24))
    uri = check_source(str(root), settings)
    store = open_store(settings)
    runtime = Runtime(settings, store=store, sources={uri: LocalSource(root)})
    prefix = settings.redis.prefix
    try:
        with worker_thread(create_app(settings), runtime, queues=all_queues(settings)):
            first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)))
            assert (first.state, first.done) == (JobState.DONE, 24), first
            live = store.resolve(LIVE_ALIAS)
            before(root, keys)
            reindex = submit_reindex(tasks(settings), jobs, 2, str(root)).job_id
            started = wait_job(jobs, reindex, until=lambda j: bool(j.collection))
            hold = start(jobs.redis, prefix, live=live, candidate=started.collection, share=0.05)
            job = wait_job(jobs, reindex, 300, until=lambda j: j.phase == JobPhase.CATCH_UP)
            assert job.state == JobState.FINALIZING, job
            yield Held(settings, jobs, store, runtime, root, keys, live, job, hold)
            wait_idle(jobs, 300)
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)


def unannounced(root: Path, keys: list[str]) -> None:
    """Before the load lists them (the live side never hears): two photos written, one
    overwritten, one deleted."""
    write_photo(root / "churn/a.jpg", 301)
    write_photo(root / "churn/b.jpg", 302)
    write_photo(root / keys[0], 303)
    (root / keys[1]).unlink()


def test_unannounced_changes_are_repaired_before_the_switch_and_counted(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    with held_reindex(two_versions, tmp_path, unannounced) as reindex:
        keys = reindex.keys
        # The load listed and embedded the folder as `unannounced` left it.
        assert held(reindex.store, reindex.job.collection) == in_source(root)
        # After the load, again unannounced: the two written are deleted and overwritten, the
        # overwritten one is deleted, the deleted one written again.
        (root / "churn/a.jpg").unlink()
        write_photo(root / "churn/b.jpg", 401)
        (root / keys[0]).unlink()
        write_photo(root / keys[1], 402)
        job = reindex.release()
        assert job.state == JobState.DONE, (job, reindex.jobs.problems(job.id))
        assert (job.repaired, job.repair_rounds) == (4, 1), job
        assert "repaired 4 in 1 rounds" in describe(job)
        store = reindex.store
        new = store.resolve(LIVE_ALIAS)
        assert new == job.collection and store.aliases()[PREVIOUS_ALIAS] == reindex.live
        assert held(store, new) == in_source(root)
        # The retired live collection missed them too: its log holds them for a rollback.
        repaired = {"churn/a.jpg", "churn/b.jpg", keys[0], keys[1]}
        assert repaired <= reindex.runtime.capture.pending(reindex.live)
        rolled = wait_job(reindex.jobs, submit_rollback(tasks(reindex.settings), reindex.jobs))
        assert rolled.state == JobState.DONE, rolled
        assert held(store, reindex.live) == in_source(root)


def test_a_photo_the_new_collection_lost_fails_the_reindex_named(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> None:
    with held_reindex(two_versions, tmp_path) as reindex:
        lost = reindex.keys[5]
        [point] = reindex.store.points_by_key(reindex.job.collection, [lost])
        reindex.store.delete(reindex.job.collection, [point.photo_id])
        job = reindex.release()
        assert job.state == JobState.FAILED, job
        assert f"{lost} is missing" in job.message, job.message
        assert job.repaired == 0, job
        assert reindex.store.resolve(LIVE_ALIAS) == reindex.live
