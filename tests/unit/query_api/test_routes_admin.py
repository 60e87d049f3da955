"""The admin routes that need no worker, over the in-process store: the collections and their
roles, the largest near-duplicate groups, a job that does not exist; only for an admin key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from core.vectorstore import LIVE_ALIAS, VectorStore
from query_api.routes import admin
from tests.unit.query_api.conftest import LIVE, key_of, router_client

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
