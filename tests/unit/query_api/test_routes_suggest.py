"""GET /v1/suggest alone over the in-process store and the session's Redis: completions from
the collection's tags and words and from queries several sessions searched, a key checked as
a search's is, and what a search box never holds refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.feedback.searchlog import SearchRecord, new_search_id
from core.terms import TERMS_FIELD
from core.vectorstore import VectorStore
from query_api.routes import suggest
from query_api.services import Services
from query_api.suggest.suggestions import Suggestions
from tests.unit.query_api.conftest import LIVE, key_of, router_client

SECRET = "ps_suggest-test-key"


@pytest.fixture(scope="module")
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """The route over the module's store, its photos with the words of their titles, called
    with a key of the search scope."""
    shared_store.set_payloads(
        LIVE,
        {
            "cat-1": {TERMS_FIELD: ["cat", "sofa"]},
            "cat-2": {TERMS_FIELD: ["cat", "castle"]},
            "dog-1": {TERMS_FIELD: ["dog"]},
        },
    )
    folder: Path = tmp_path_factory.mktemp("api")
    keys = [key_of("app", SECRET)]
    with_key = router_client(shared_store, folder, suggest.router, keys=keys)
    for client in with_key:
        client.headers["X-API-Key"] = SECRET
        yield client


def refreshed(client: TestClient) -> Suggestions:
    """The app's suggestions after a refresh that read everything written before it."""
    suggestions: Suggestions = client.app.state.suggestions  # type: ignore[attr-defined]
    client.portal.call(suggestions.refresh)  # type: ignore[union-attr]
    return suggestions


def search(client: TestClient, query: str, session: str) -> None:
    """A search's record, written through the replica's own search log."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    log = services.searchlog
    record = SearchRecord(
        search_id=new_search_id(),
        query=query,
        collection=LIVE,
        model_version=1,
        shown=["cat-1"],
        session=session,
        at=log.now(),
    )
    assert client.portal.call(log.write, record)  # type: ignore[union-attr]


def test_a_prefix_completes_with_the_collections_tags_and_words(client: TestClient) -> None:
    refreshed(client)
    answer = client.get("/v1/suggest", params={"q": "Ca"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "q": "Ca",
        "suggestions": [{"text": "cat", "source": "tag"}, {"text": "castle", "source": "title"}],
    }
    assert answer.headers["Cache-Control"] == "private, max-age=60"
    two = client.get("/v1/suggest", params={"q": "a big ca", "limit": 1}).json()
    assert two["suggestions"] == [{"text": "a big cat", "source": "tag"}]


def test_a_query_is_suggested_once_three_sessions_searched_it(client: TestClient) -> None:
    for _ in range(5):
        search(client, "cat burglar", "one-session-000001")
    refreshed(client)
    texts = [s["text"] for s in client.get("/v1/suggest?q=cat").json()["suggestions"]]
    assert "cat burglar" not in texts
    search(client, "cat burglar", "two-session-000002")
    search(client, "cat burglar", "three-session-0003")
    refreshed(client)
    answer = client.get("/v1/suggest?q=cat").json()
    assert answer["suggestions"][0] == {"text": "cat burglar", "source": "query"}


@pytest.mark.parametrize(
    "query", ["q=", "q=%20%20", "q=" + "x" * 101, "q=cat&limit=0", "q=cat&limit=21", "limit=3"]
)
def test_what_no_search_box_holds_is_a_422(client: TestClient, query: str) -> None:
    answer = client.get(f"/v1/suggest?{query}")
    assert answer.status_code == 422, answer.text


def test_a_parameter_given_twice_is_a_422(client: TestClient) -> None:
    assert client.get("/v1/suggest?q=cat&q=dog").status_code == 422


def test_an_unknown_key_is_refused_as_a_search_would_be(client: TestClient) -> None:
    answer = client.get("/v1/suggest?q=cat", headers={"X-API-Key": "ps_unknown"})
    assert answer.status_code == 401
