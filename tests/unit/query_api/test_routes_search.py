"""The search routes alone over the in-process store: the recommendations, a keyword search,
and the parameters they refuse. The searches that embed a query need Triton, which cannot run
in a unit test: test_search.py runs them with a stand-in encoder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from core.vectorstore import VectorStore
from query_api.routes import search
from tests.unit.query_api.conftest import api_settings, result_ids, router_app


@pytest.fixture(scope="module")
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    settings = api_settings(tmp_path_factory.mktemp("api"))
    with TestClient(router_app(settings, shared_store, search.router)) as test_client:
        yield test_client


def test_a_recommendation_leans_to_its_positives_and_excludes_its_examples(
    client: TestClient,
) -> None:
    answer = client.get(
        "/v1/search/recommend", params={"positive": "cat-1", "negative": "boat-1", "limit": 2}
    )
    assert answer.status_code == 200
    assert result_ids(answer.json())[0] == "cat-2"
    assert not {"cat-1", "boat-1"} & set(result_ids(answer.json()))


def test_a_keyword_search_answers_by_words_alone_by_get_or_post(client: TestClient) -> None:
    by_get = client.get("/v1/search", params={"q": "dog", "mode": "keyword"})
    by_post = client.post("/v1/search", json={"q": "dog", "mode": "keyword"})
    for answer in (by_get, by_post):
        assert answer.status_code == 200
        assert result_ids(answer.json()) == ["dog-1"]
        assert (answer.json()["mode"], answer.json()["cached"]) == ("keyword", None)


def test_a_scalar_parameter_given_twice_is_refused(client: TestClient) -> None:
    answer = client.get("/v1/search?q=cat&mode=keyword&photographer=a&photographer=b")
    assert answer.status_code == 422
    assert "photographer: give each once" in answer.text


def test_an_example_not_indexed_is_a_404(client: TestClient) -> None:
    answer = client.post("/v1/search/recommend", json={"positive": ["unicorn-1"]})
    assert answer.status_code == 404
    assert "no photo 'unicorn-1' in the index" in answer.text
