"""The admin routes that need no worker, over the in-process store: the collections and their
roles, the largest near-duplicate groups, a job that does not exist; only for an admin key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from core.vectorstore import GROUP_FIELD, LIVE_ALIAS, VectorStore
from query_api.routes import admin
from tests.unit.query_api.conftest import LIVE, api_settings, key_of, router_app

ADMIN = {"X-API-Key": "admin-secret"}
READER = {"X-API-Key": "reader-secret"}


@pytest.fixture(scope="module")
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    cats = {GROUP_FIELD: "cats"}
    shared_store.set_payloads(LIVE, {"cat-1": cats, "cat-2": cats})
    keys = [key_of("ops", "admin-secret", "admin"), key_of("page", "reader-secret", "search")]
    settings = api_settings(tmp_path_factory.mktemp("api"), keys=keys)
    with TestClient(router_app(settings, shared_store, admin.router)) as test_client:
        yield test_client


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
