"""A real reindex held by an interleaved experiment, through the admin API with a real Celery
worker: started as soon as the reindex is, the experiment keeps it in its catch-up while
searches interleave both collections; ended with "switch" it switches, with "drop" it is
cancelled and its collection dropped.

Qdrant Edge admits one process per store, so this test process owns it and runs both the API
and the worker on its threads, as the embedded mode does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from redis import Redis

from core.feedback.searchlog import SearchRecord, record_key
from core.jobstatus import JobPhase, JobStatus
from core.settings import Settings
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, VectorStore, collection_name
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, embedded_runtime, serving
from tests.support.indexing import ApiJobs, photo_folder, wait_job
from tests.support.waiting import wait_until

ADMIN = {"X-API-Key": ADMIN_KEY}


@pytest.fixture
def embedded(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> Iterator[tuple[Settings, VectorStore, Runtime]]:
    repo, server = two_versions
    with embedded_runtime(repo, server.url, tmp_path / "data") as parts:
        yield parts


def _held(job: JobStatus) -> bool:
    return job.phase == JobPhase.CATCH_UP and "held for an experiment" in job.message


def _interleaved(admin: httpx.Client, redis: Redis, settings: Settings) -> bool:
    body = admin.get("/v1/search", params={"q": "a photo", "mode": "vector", "limit": 4}).json()
    data = redis.get(record_key(settings.redis.prefix, body["search_id"]))
    assert isinstance(data, bytes)
    return SearchRecord.model_validate_json(data).sides is not None


@pytest.mark.parametrize("decision", ["switch", "drop"])
def test_a_reindex_waits_for_its_experiment_and_does_as_the_admin_decides(
    embedded: tuple[Settings, VectorStore, Runtime], tmp_path: Path, decision: str
) -> None:
    settings, store, runtime = embedded
    root = tmp_path / "photos"
    photo_folder(root, 8)
    with (
        closing(Redis.from_url(settings.redis.url)) as redis,
        worker_thread(create_app(settings), runtime, queues=all_queues(settings)),
        serving(settings, store) as api,
        httpx.Client(base_url=api.url, headers=ADMIN, timeout=60) as admin,
    ):
        jobs = ApiJobs(api.url, ADMIN)
        synced = admin.post("/v1/admin/sync", json={"source": str(root)})
        assert synced.status_code == 202, synced.text
        assert wait_job(jobs, synced.json()["job_id"]).state == "done"
        live = store.resolve(LIVE_ALIAS)

        reindex = admin.post("/v1/admin/reindex", json={"model_version": 2})
        assert reindex.status_code == 202, reindex.text
        job_id = reindex.json()["job_id"]
        candidate = collection_name(2, job_id)
        # Named at once, before the worker may have created the collection.
        started = admin.post("/v1/admin/experiments", json={"candidate": candidate, "share": 1})
        assert started.status_code == 201, started.text

        held = wait_job(jobs, job_id, until=_held)
        assert held.state not in ("done", "failed", "cancelled"), held
        assert store.resolve(LIVE_ALIAS) == live
        # Once the candidate has caught up, searches interleave the two collections.
        wait_until(
            lambda: _interleaved(admin, redis, settings),
            settings.api.alias_cache_s + 60,
            "an interleaved search",
        )

        ended = admin.post("/v1/admin/experiments/current/end", json={"decision": decision})
        assert ended.status_code == 200, ended.text
        job = wait_job(jobs, job_id)
        if decision == "switch":
            assert job.state == "done", job
            assert store.resolve(LIVE_ALIAS) == candidate
        else:
            assert job.state == "cancelled" and "ended with the decision to drop" in job.message
            assert store.resolve(LIVE_ALIAS) == live
            assert not store.has_collection(candidate)
