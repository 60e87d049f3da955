"""Suggestions through the real API, Triton, Redis and store: completions from the indexed
photos' titles and tags, and a query suggested only once several sessions searched it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from model.triton_server import TritonServer
from photosearch_client import Client, Suggestion
from tests.support.api import ApiServer, api_settings, indexed_api, ok_json
from tests.support.waiting import wait_until

ONE_SESSION = "system-suggest-one-0001"
OTHERS = [f"system-suggest-other-{n:03d}" for n in range(3)]


@pytest.fixture(scope="module")
def server(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """Six photos (titles "photo N", tags among cat, city, space, food, people, night) behind
    the API, anonymous search on as the public page runs it."""
    tmp = tmp_path_factory.mktemp("suggest")
    settings = api_settings(tmp / "data", triton.url, repository, anonymous_search=True)
    with indexed_api(settings, tmp / "photos", 6) as served:
        yield served.server


def refreshed(server: ApiServer) -> None:
    """Wait for a refresh of the replica's suggestions begun after this call: it read every
    search recorded before."""
    suggestions = server.app.state.suggestions
    ticket = suggestions.request_refresh()
    wait_until(lambda: suggestions.finished >= ticket, 60, "the suggestions' refresh")


def suggested(server: ApiServer, q: str, **params: Any) -> list[dict[str, str]]:
    answer = ok_json(httpx.get(f"{server.url}/v1/suggest", params={"q": q, **params}))
    assert answer["q"] == q
    found: list[dict[str, str]] = answer["suggestions"]
    return found


def searched(server: ApiServer, q: str, session: str | None) -> None:
    headers = {"X-Session-Id": session} if session else {}
    answer = ok_json(httpx.get(f"{server.url}/v1/search", params={"q": q}, headers=headers))
    assert answer["results"], q  # a search that showed nothing never counts


def test_a_prefix_completes_with_the_photos_tags_and_title_words(server: ApiServer) -> None:
    refreshed(server)
    assert {"text": "city", "source": "tag"} in suggested(server, "ci")
    assert suggested(server, "Pho") == [{"text": "photo", "source": "title"}]
    # The last word completes; the words before it stay as typed (normalized).
    assert {"text": "a quiet night", "source": "tag"} in suggested(server, "A  quiet NI")
    assert suggested(server, "zebra") == []
    with Client(server.url) as client:
        page = client.suggest("ci", limit=1)
    assert page.suggestions == [Suggestion(text="city", source="tag")]


def test_a_query_is_suggested_only_once_three_sessions_searched_it(server: ApiServer) -> None:
    for _ in range(4):
        searched(server, "cat at night", ONE_SESSION)
        searched(server, "cat at night", None)  # no session: counts for nothing
    searched(server, "cat at night", OTHERS[0])  # a second session: still too few
    for session in OTHERS:
        searched(server, "food for people", session)
    refreshed(server)
    assert suggested(server, "food f")[0] == {"text": "food for people", "source": "query"}
    texts = [s["text"] for s in suggested(server, "cat", limit=20)]
    assert "cat at night" not in texts
    searched(server, "Cat  at NIGHT", OTHERS[1])  # normalized as a search is: the same query
    refreshed(server)
    assert suggested(server, "cat a")[0] == {"text": "cat at night", "source": "query"}


@pytest.mark.parametrize("params", [{"q": ""}, {"q": "   "}, {"q": "x" * 101}, {"limit": 8}])
def test_a_blank_missing_or_overlong_text_is_a_422(
    server: ApiServer, params: dict[str, Any]
) -> None:
    answer = httpx.get(f"{server.url}/v1/suggest", params=params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid_request"
