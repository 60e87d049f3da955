"""The photo routes alone over the in-process store: more like a photo, and its
near-duplicates (the original and thumbnail routes are another test's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from core.vectorstore import VectorStore
from query_api.routes import photos
from tests.unit.query_api.conftest import LIVE, result_ids, router_client


@pytest.fixture(scope="module")
def client(
    grouped_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    yield from router_client(grouped_store, tmp_path_factory.mktemp("api"), photos.router)


def test_more_like_a_photo_lists_its_neighbours_but_never_itself(client: TestClient) -> None:
    answer = client.get("/v1/photos/cat-1/similar", params={"collapse": "false", "limit": 2})
    assert answer.status_code == 200
    assert result_ids(answer.json()) == ["cat-2", "dog-1"]
    assert answer.json()["collection"] == LIVE


def test_more_like_a_photo_collapses_its_own_group_by_default(client: TestClient) -> None:
    answer = client.get("/v1/photos/dog-1/similar", params={"limit": 3})
    ids = result_ids(answer.json())
    assert len([i for i in ids if i.startswith("cat-")]) == 1
    (cat,) = (r for r in answer.json()["results"] if r["id"].startswith("cat-"))
    assert cat["duplicates"]["group"] == "cats"


def test_more_like_a_photo_not_indexed_is_a_404_with_a_message(client: TestClient) -> None:
    answer = client.get("/v1/photos/unicorn-1/similar")
    assert answer.status_code == 404
    assert "no photo 'unicorn-1' in the index" in answer.text


def test_a_photos_near_duplicates_are_the_others_of_its_group(client: TestClient) -> None:
    answer = client.get("/v1/photos/cat-1/duplicates")
    assert answer.status_code == 200
    assert answer.json()["group"] == "cats"
    assert [photo["id"] for photo in answer.json()["photos"]] == ["cat-2"]
