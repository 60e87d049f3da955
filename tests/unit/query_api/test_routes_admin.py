"""The admin routes that need no worker, over the in-process store: the collections and their
roles, the largest near-duplicate groups, a job that does not exist, an increment queued behind
a running sync; only for an admin key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from core.jobs import LIVE_LOCK, Jobs
from core.jobstatus import JobKind, JobState
from core.vectorstore import LIVE_ALIAS, VectorStore
from query_api.routes import admin
from tests.unit.query_api.conftest import LIVE, api_settings, key_of, router_app, router_client

ADMIN = {"X-API-Key": "admin-secret"}
READER = {"X-API-Key": "reader-secret"}


@pytest.fixture(scope="module")
def client(
    grouped_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    keys = [key_of("ops", "admin-secret", "admin"), key_of("page", "reader-secret", "search")]
    yield from router_client(grouped_store, tmp_path_factory.mktemp("api"), admin.router, keys=keys)


def test_the_collections_are_listed_with_the_alias_of_the_live_one(client: TestClient) -> None:
    answer = client.get("/v1/admin/collections", headers=ADMIN)
    assert answer.status_code == 200
    (live,) = answer.json()
    assert (live["name"], live["points"], live["aliases"]) == (LIVE, 4, [LIVE_ALIAS])


def test_the_largest_groups_of_near_duplicates_come_first(client: TestClient) -> None:
    answer = client.get("/v1/admin/duplicates", headers=ADMIN, params={"limit": 1})
    assert answer.status_code == 200
    assert answer.json()["groups"] == [{"group": "cats", "size": 2, "ids": ["cat-1", "cat-2"]}]


def test_a_job_that_does_not_exist_is_a_404(client: TestClient) -> None:
    assert client.get("/v1/admin/jobs/nope", headers=ADMIN).status_code == 404


def test_a_key_without_the_admin_scope_is_forbidden(client: TestClient) -> None:
    answer = client.get("/v1/admin/collections", headers=READER)
    assert answer.status_code == 403
    assert "lacks the 'admin' scope" in answer.text


def test_an_increment_asked_for_while_a_sync_runs_is_queued_behind_it(
    grouped_store: VectorStore, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    settings = api_settings(tmp_path, keys=[key_of("ops", "admin-secret", "admin")])
    settings.redis.url = redis_url  # the session's: the job records are this test's to read
    settings.indexer.feed = (tmp_path / "changes.log").as_uri()
    source = (tmp_path / "photos").as_uri()
    jobs = Jobs(redis, settings.redis.prefix)
    sync_id = jobs.create(JobKind.SYNC, source=source, force=0)
    assert jobs.claim_lock(LIVE_LOCK, sync_id) is None
    jobs.start(sync_id, state=JobState.RUNNING)
    with TestClient(router_app(settings, grouped_store, admin.router)) as client:
        body = {"kind": "increment", "source": source}
        answer = client.post("/v1/admin/sync", headers=ADMIN, json=body)
        assert answer.status_code == 202, answer.text
        accepted = answer.json()
        assert (accepted["queued"], accepted["joined"]) == (True, False), accepted
        assert accepted["job_id"] != sync_id
        job = client.get(accepted["status_url"], headers=ADMIN).json()
        assert (job["state"], job["kind"]) == ("queued", "increment"), job
        assert job["message"].startswith(f"waits for sync job {sync_id}"), job
