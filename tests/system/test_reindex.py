"""A full reindex to model version 2 while searches run, the atomic switch, and rollback.

Qdrant Edge admits one process per store, so this test is that process: it owns the store,
runs the Celery worker on its threads (as `photosearch up` does in the embedded mode), and
searches; every task still travels through the real Redis queue.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from core.jobs import Jobs
from core.jobstatus import JobState
from core.sources import LocalSource
from core.submit import queue_sync, submit_reindex, submit_rollback
from core.taskqueue import all_queues, control_queue, plan_queue
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    VectorStore,
    model_version_of,
    open_store,
)
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.jobs import rollback as rollingback
from indexer.jobs.sync import alias_lock
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.images import encode
from tests.support.indexing import (
    drop_keys,
    photo_folder,
    settings_for,
    tasks,
    variant,
    wait_idle,
    wait_job,
    write_photo,
)
from tests.support.waiting import wait_until


class SearchLoop(threading.Thread):
    """Searches the live alias as the query API will: the collection's own model version."""

    def __init__(self, runtime: Runtime, store: VectorStore) -> None:
        super().__init__(daemon=True)
        self.runtime, self.store = runtime, store
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.seen: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                collection = self.store.resolve(LIVE_ALIAS)
                version = model_version_of(collection)
                query = self.runtime.embedder.encode_texts(["a cat"], model_version=version)
                vector = self.runtime.run(query)[0]
                hits = self.store.search(collection, vector, limit=5)
                if len(hits) != 5:
                    self.failures.append(f"{collection}: {len(hits)} hits")
                else:
                    self.ok += 1
                    self.seen.add(collection)
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self.stop.wait(0.01)  # a steady pace, which ends as the loop stops


def test_reindex_switches_with_no_failed_search_and_rollback_returns(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> None:
    repo, server = two_versions
    # No rollback window: the previous collection takes no change after the switch.
    settings = settings_for(tmp_path / "data", server.url, repo, model_version=1, rollback_days=0)
    jobs = Jobs.from_settings(settings)
    root = tmp_path / "photos"
    photo_folder(root, 24)
    source = str(root)
    store = open_store(settings)
    runtime = Runtime(settings, store=store)
    everything = all_queues(settings)
    try:
        with worker_thread(create_app(settings), runtime, queues=everything):
            first = queue_sync(tasks(settings), jobs, source)
            assert wait_job(jobs, first).done == 24
        v1 = store.resolve(LIVE_ALIAS)
        assert model_version_of(v1) == 1

        searches = SearchLoop(runtime, store)
        searches.start()
        # Plan the reindex with no embedding worker yet, then change the source under it and
        # sync the live collection: its changes are logged for the new collection, and the
        # catch-up replays them (no listing of the catalogue).
        with worker_thread(
            create_app(settings), runtime, queues=[control_queue(settings), plan_queue(settings)]
        ):
            job_id = submit_reindex(tasks(settings), jobs, 2, source).job_id
            wait_job(jobs, job_id, until=lambda j: j.batches_total > 0 and not j.planning)
            write_photo(root / "late/new.jpg", 40)
            (root / "day1/photo001.png").write_bytes(encode(variant(41), "PNG"))
            (root / "day2/photo002.webp").unlink()
            nightly = queue_sync(tasks(settings), jobs, source)
            wait_job(jobs, nightly, until=lambda j: j.shards_total > 0 and not j.planning)
        with worker_thread(create_app(settings), runtime, queues=everything):
            job = wait_job(jobs, job_id)
            wait_idle(jobs)
            # Searches go on after the switch, to the new collection.
            live = store.resolve(LIVE_ALIAS)
            wait_until(lambda: live in searches.seen, 60, "a search of the new collection")
            searches.stop.set()
            searches.join()

            assert job.state == JobState.DONE, (job, jobs.problems(job_id))
            synced = wait_job(jobs, nightly)
            assert (synced.state, synced.done, synced.deleted) == ("done", 2, 1), synced
            assert job.replayed == 3 and job.lag == 0, job
            assert searches.failures == [] and searches.ok > 0
            v2 = store.resolve(LIVE_ALIAS)
            assert model_version_of(v2) == 2 and v2 != v1
            assert searches.seen == {v1, v2}
            assert store.aliases()[PREVIOUS_ALIAS] == v1
            in_source = {o.key for o in LocalSource(root).list_range()}
            assert {v.photo_id for v in store.points(v2)} == in_source
            assert store.count(v2) == len(in_source) == 24
            [old] = store.retrieve(v1, ["day2/photo000.jpg"], with_vectors=True)
            [new] = store.retrieve(v2, ["day2/photo000.jpg"], with_vectors=True)
            assert old.vector is not None and new.vector is not None
            assert float(np.dot(old.vector, new.vector)) < 0.99  # other weights, other vectors
            assert new.payload["model_version"] == 2

            # Past the rollback window a rollback is refused, saying why: the previous
            # collection would serve deleted photos and miss new ones.
            refused = wait_job(jobs, submit_rollback(tasks(settings), jobs))
            assert refused.state == JobState.FAILED, refused
            assert f"rollback refused: {v1} has received no change since the switch" in (
                refused.message
            )
            assert store.aliases()[LIVE_ALIAS] == v2

        # The aliases' swap alone: see test_indexer for `photosearch index rollback` itself.
        message = rollingback.rollback(
            store=runtime.store,
            capture=runtime.records.capture,
            lock=alias_lock(runtime.redis, runtime.settings.redis.prefix),
            rollback_days=runtime.settings.indexer.rollback_days,
        )
        assert f"{LIVE_ALIAS} -> {v1}" in message
        assert store.aliases() == {LIVE_ALIAS: v1, PREVIOUS_ALIAS: v2}
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)
