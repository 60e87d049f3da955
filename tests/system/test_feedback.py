"""Feedback from searches through the real API, Triton, Redis and store: searches logged,
events posted by a caller and by the page in the machine's Chromium, and the commands that
read them (`photosearch analytics`, `photosearch judgements from-clicks`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page
from redis import Redis
from typer.testing import CliRunner

from core.feedback.clickmodel import query_id
from core.feedback.events import StoredEvent, events_key
from core.quality.judgements import load_judgements
from core.settings import Settings, get_settings
from model.triton_server import TritonServer
from photosearch.cli import app
from tests.support.api import SEARCH_KEY, api_settings, indexed_api
from tests.support.browser import search
from tests.support.waiting import wait_until

SESSIONS = [f"system-session-{n:04d}" for n in range(3)]
EVENTS_PER_MINUTE = 20


@pytest.fixture(scope="module")
def site(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Settings]]:
    """Six photos behind the API, anonymous search on (as the public page runs it), and a
    bound of 20 events a minute per caller."""
    tmp = tmp_path_factory.mktemp("feedback")
    settings = api_settings(
        tmp / "data",
        triton.url,
        repository,
        anonymous_search=True,
        events_per_minute=EVENTS_PER_MINUTE,
    )
    with indexed_api(settings, tmp / "photos", 6) as served:
        yield served.server.url, settings


@pytest.fixture
def commands(site: tuple[str, Settings], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The commands read the site's Redis keys (its prefix)."""
    monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", site[1].redis.prefix)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def searched(url: str, q: str, session: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/v1/search", params={"q": q, **params}, headers={"X-Session-Id": session}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def stored_events(redis: Redis, settings: Settings) -> list[StoredEvent]:
    entries: list[tuple[bytes, dict[bytes, bytes]]] = redis.xrange(  # type: ignore[assignment]
        events_key(settings.redis.prefix)
    )
    return [StoredEvent.model_validate_json(fields[b"event"]) for _, fields in entries]


def test_searches_and_clicks_make_the_analytics_and_judgements_a_hand_count_does(
    site: tuple[str, Settings], redis: Redis, commands: None, tmp_path: Path
) -> None:
    url, settings = site
    # Three sessions search "a red photo" and open its second result; one also searches a
    # word no photo carries (zero results) and one searches again and opens nothing.
    second = ""
    for session in SESSIONS:
        body = searched(url, "a red photo", session, limit=4)
        second = body["results"][1]["id"]
        event = {"search_id": body["search_id"], "photo_id": second, "rank": 2}
        posted = httpx.post(
            f"{url}/v1/events",
            json={"session": session, "events": [{**event, "action": "opened"}]},
        )
        assert posted.status_code == 202, posted.text
        assert posted.json() == {"accepted": 1, "searches": 1}
    nothing = searched(url, "Xylophone", SESSIONS[0], mode="keyword")
    assert nothing["results"] == []
    searched(url, "a blue photo", SESSIONS[1], limit=4)

    figures = CliRunner().invoke(app, ["analytics", "--days", "1", "--json"])
    assert figures.exit_code == 0, figures.output
    counted = json.loads(figures.output)
    assert (counted["searches"], counted["sessions"], counted["searches_with_a_click"]) == (
        5,
        3,
        3,
    )
    assert counted["zero_result"] == [{"query": "xylophone", "searches": 1}]
    assert counted["no_click"] == [{"query": "a blue photo", "searches": 1}]
    assert counted["by_rank"][1] == {"rank": 2, "shown": 4, "clicked": 3, "ctr": 0.75}

    out = tmp_path / "clicks"
    made = CliRunner().invoke(app, ["judgements", "from-clicks", "--out", str(out)])
    assert made.exit_code == 0, made.output
    # The second result: read and opened in all three searches -> 2; the first, read and
    # passed over three times, is not written.
    judged = load_judgements(out)
    assert dict(judged.grades(query_id("a red photo"))) == {second: 2}
    assert all(e.session in SESSIONS for e in stored_events(redis, settings))


def test_events_past_a_keys_bound_are_refused_and_a_bad_one_is_named(
    site: tuple[str, Settings],
) -> None:
    url, _ = site
    key = {"X-API-Key": SEARCH_KEY}
    body = httpx.get(f"{url}/v1/search", params={"q": "a cat", "limit": 2}, headers=key).json()
    event = {"search_id": body["search_id"], "photo_id": body["results"][0]["id"], "rank": 1}
    batch = {"events": [{**event, "action": "skipped"}] * 10}
    for _ in range(EVENTS_PER_MINUTE // 10):
        assert httpx.post(f"{url}/v1/events", json=batch, headers=key).status_code == 202
    refused = httpx.post(f"{url}/v1/events", json=batch, headers=key)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    bad = httpx.post(
        f"{url}/v1/events", json={"events": [{**event, "rank": 2, "action": "opened"}]}
    )
    assert bad.status_code == 422
    assert "events[0]: the search showed" in bad.json()["message"]


def test_a_click_on_a_result_in_the_page_sends_an_opened_event(
    site: tuple[str, Settings], page: Page, redis: Redis
) -> None:
    url, settings = site
    page.goto(url)
    search(page, "a green photo")
    result = page.get_by_test_id("result").nth(2)
    clicked = result.get_attribute("data-id")
    # The module's other tests post events too, some on this photo: only what follows counts.
    before = len(stored_events(redis, settings))
    with page.expect_response("**/v1/events") as answered:
        result.click()
    assert answered.value.status == 202

    def sent() -> StoredEvent | None:
        after = stored_events(redis, settings)[before:]
        return next((e for e in after if e.photo_id == clicked), None)

    event = wait_until(sent, 30, f"an event on {clicked}")
    assert (event.rank, event.action) == (3, "opened")
    # The page's session: random, the same the search was logged with.
    assert event.session is not None and len(event.session) == 32
