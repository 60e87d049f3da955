"""A reindex the store cannot hold is refused before it starts, through the real path: the
request on the queue, the worker's task, start_reindex's pre-flight check, the failed job."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.jobs import Jobs
from core.jobstatus import JobState
from core.submit import submit_reindex
from core.taskqueue import control_queue
from core.vectorstore import LIVE_ALIAS, PhotoPoint, collection_name, open_store
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.indexing import drop_keys, photo_folder, settings_for, tasks, wait_job


def test_a_reindex_that_does_not_fit_the_store_fails_with_the_figures_and_writes_nothing(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> None:
    repo, server = two_versions
    settings = settings_for(tmp_path / "data", server.url, repo, model_version=1)
    # Made small on purpose: a megabyte of disk for the vector store.
    settings.qdrant.disk_gib = 1 / 1024
    jobs = Jobs.from_settings(settings)
    root = tmp_path / "photos"
    photo_folder(root, 2)
    store = open_store(settings)
    runtime = Runtime(settings, store=store)
    try:
        live = collection_name(1, "live")
        dim = runtime.embedder.manifest(1).embedding_dim
        store.create_collection(live, dim)
        vectors = np.random.default_rng(0).normal(size=(50, dim)).astype(np.float32)
        store.upsert(live, [PhotoPoint(f"p{i:02d}", v, {}) for i, v in enumerate(vectors)])
        store.set_aliases({LIVE_ALIAS: live})

        with worker_thread(create_app(settings), runtime, queues=[control_queue(settings)]):
            job_id = submit_reindex(tasks(settings), jobs, 2, str(root)).job_id
            job = wait_job(jobs, job_id)

        assert job.state == JobState.FAILED, job
        assert job.message.startswith("reindex refused before it started: needs "), job.message
        assert "for 50 photos beside the collections the store holds" in job.message
        assert "short by " in job.message and job.message.endswith(" of disk"), job.message
        assert [c.name for c in store.collections()] == [live]
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)
