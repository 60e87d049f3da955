"""The search page in the machine's Chromium, against the real API, Triton, Redis and store.

Every check compares what the page shows with what the JSON API answers for the same
search. Playwright drives Debian's /usr/bin/chromium (never a browser of `playwright install`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.settings import Settings
from core.vectorstore import VectorStore
from model.triton_server import TritonServer
from tests.support.api import SEARCH_KEY, Indexed, api_settings, indexed_api, serving
from tests.support.browser import cards, search, settle, shown, started, thumbnails_loaded
from tests.support.indexing import drop_keys


@dataclass
class Site:
    url: str
    settings: Settings
    store: VectorStore
    indexed: Indexed

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        response = httpx.get(self.url + path, params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@pytest.fixture(scope="module")
def site(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """12 real-photo variants behind the API with anonymous search on, as the public page runs."""
    tmp = tmp_path_factory.mktemp("page")
    settings = api_settings(
        tmp / "data", triton.url, repository, anonymous_search=True, redis_timeout_s=2.0
    )
    with indexed_api(settings, tmp / "photos", 12) as served:
        yield Site(served.server.url, settings, served.store, served.indexed)


def ids_of(body: dict[str, Any]) -> list[str]:
    return [r["id"] for r in body["results"]]


def open_filters(page: Page) -> None:
    page.get_by_test_id("filters").locator("summary").click()


def test_text_search_shows_the_api_results_with_loaded_thumbnails(site: Site, page: Page) -> None:
    """Query + Enter: the cards are the API's answer; thumbnails load; nothing tells a visitor
    whether someone searched the phrase before (the cache)."""
    page.goto(site.url)
    expect(page).to_have_title("PhotoSearch")
    query = "a cat sitting on a sofa"
    search(page, query)
    status = page.get_by_test_id("status")
    expect(status).to_contain_text("results")
    expect(status).not_to_contain_text("cache")

    body = site.api("/v1/search", q=query, limit=20)
    assert len(body["results"]) == 12 and body["next_offset"] is None
    assert cards(page) == shown(body)
    expect(status).to_contain_text("12 results")
    expect(status).to_contain_text("model version 1")
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Results for “{query}”")
    expect(page.get_by_test_id("more-results")).to_be_hidden()
    expect(page.get_by_test_id("model-notice")).to_be_hidden()  # the checkpoint's weights

    images = page.locator("[data-testid=result] img")
    expect(images).to_have_count(12)
    thumbnails_loaded(page)
    first = body["results"][0]
    assert images.first.get_attribute("alt") == first["metadata"]["title"]
    assert images.first.get_attribute("src") == first["thumbnail_url"]

    search(page, query)  # the same query again: its embedding now comes from Redis
    expect(status).to_contain_text("12 results")
    expect(status).not_to_contain_text("cache")
    assert cards(page) == shown(body)


def test_filters_narrow_the_results_as_the_api_does(site: Site, page: Page) -> None:
    """Photographer, tags (repeated tags_any), whole-day dates and a minimum similarity."""
    page.goto(site.url)
    open_filters(page)
    query = "a photo"
    page.get_by_label("Photographer").fill("ana")
    search(page, query)
    body = site.api("/v1/search", q=query, limit=20, photographer="ana")
    assert cards(page) == shown(body)
    ana = {p for p, meta in site.indexed.payloads.items() if meta["photographer"] == "ana"}
    assert set(ids_of(body)) == ana and len(ana) == 4

    page.get_by_label("Photographer").fill("")
    page.get_by_label("Any of these tags").fill("cat, night")
    search(page, query)
    body = site.api("/v1/search", q=query, limit=20, tags_any=["cat", "night"])
    assert cards(page) == shown(body)
    tagged = {
        p for p, meta in site.indexed.payloads.items() if {"cat", "night"} & set(meta["tags"])
    }
    assert set(ids_of(body)) == tagged and 0 < len(tagged) < 12

    # Photo i was created on 2024-01-01 + 10 i days: 01-11 .. 02-10 holds photos 1 to 4.
    page.get_by_label("Any of these tags").fill("")
    page.get_by_label("Created from").fill("2024-01-11")
    page.get_by_label("Created to").fill("2024-02-10")
    search(page, query)
    assert {i for i, _ in cards(page)} == {f"photo{i:03d}.jpg" for i in range(1, 5)}

    page.get_by_label("Created from").fill("")
    page.get_by_label("Created to").fill("")
    # The minimum is a cosine similarity: the score a vector search shows (a hybrid one
    # shows its rank fusion's).
    everything = site.api("/v1/search", q=query, limit=20, mode="vector")
    threshold = round(everything["results"][5]["score"], 4)
    page.get_by_label("Minimum similarity").fill(str(threshold))
    page.get_by_test_id("options").locator("summary").click()
    page.get_by_label("Match by").select_option("vector")
    search(page, query)
    body = site.api("/v1/search", q=query, limit=20, score_threshold=threshold, mode="vector")
    assert cards(page) == shown(body)
    assert 0 < len(body["results"]) < 12
    assert all(r["score"] >= threshold for r in body["results"])


def test_keyboard_only_more_like_this_and_more_results(site: Site, page: Page) -> None:
    """/ focuses the box; Enter searches; Tab reaches a tile; Enter opens its detail view,
    whose "More like this" shows its neighbours."""
    page.goto(site.url)
    open_filters(page)
    page.get_by_label("Per page").select_option("10")
    page.evaluate("document.activeElement.blur()")  # focus leaves the form

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.dataset.testid") == "search-input"
    query = "a rocket on its launch pad"
    before = started(page)
    page.keyboard.type(query)
    page.keyboard.press("Enter")
    settle(page, before)
    body = site.api("/v1/search", q=query, limit=10)
    assert cards(page) == shown(body)

    for _ in range(200):  # the bar's and the filter panel's controls first, then the grid
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.testid") == "result":
            break
    focused = page.evaluate("document.activeElement.dataset.id")
    first = body["results"][0]
    assert focused == first["id"]
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")

    page.keyboard.press("Enter")
    expect(page.get_by_test_id("detail")).to_be_visible()
    for _ in range(10):
        if page.evaluate("document.activeElement.dataset.testid") == "detail-similar":
            break
        page.keyboard.press("Tab")
    before = started(page)
    page.keyboard.press("Enter")
    settle(page, before)
    expect(page.get_by_test_id("detail")).to_be_hidden()
    similar = site.api(f"/v1/photos/{first['id']}/similar", limit=10)
    assert cards(page) == shown(similar)
    assert len(similar["results"]) == 10 and first["id"] not in ids_of(similar)
    heading = page.get_by_test_id("results-heading")
    expect(heading).to_have_text(f"More like {first['metadata']['title']}")
    expect(heading).to_be_focused()

    more = page.get_by_test_id("more-results")
    expect(more).to_be_visible()
    before = started(page)
    more.click()
    settle(page, before)
    rest = site.api(f"/v1/photos/{first['id']}/similar", limit=10, offset=10)
    assert cards(page) == shown(similar) + shown(rest)
    assert len(cards(page)) == 11  # every other photo, once
    expect(more).to_be_hidden()
    expect(page.get_by_test_id("status")).to_contain_text("11 results")


def test_image_upload_finds_that_photo_first(site: Site, page: Page) -> None:
    """Search by image: an indexed photo's own file comes back first, as the API answers."""
    page.goto(site.url)
    photo_id = site.indexed.ids[5]
    path = site.indexed.files[photo_id]
    before = started(page)
    page.get_by_label("Search by image").set_input_files(path)
    settle(page, before)
    found = cards(page)
    assert found[0][0] == photo_id
    response = httpx.post(
        site.url + "/v1/search/image", params={"limit": 20}, files={"file": path.read_bytes()}
    )
    assert response.status_code == 200, response.text
    assert found == shown(response.json())
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Photos like {path.name}")


def test_without_anonymous_search_the_page_shows_the_401_then_works_with_a_key(
    site: Site, page: Page, tmp_path: Path
) -> None:
    """The API's 401 message in the status line; the stored API key is sent and kept."""
    settings = api_settings(tmp_path / "data", site.settings.triton.url, site.settings.repository)
    assert not settings.api.anonymous_search
    try:
        with serving(settings, site.store) as closed:
            page.goto(closed.url)
            search(page, "a cup of coffee")
            status = page.get_by_test_id("status")
            expect(status).to_have_text(
                "an API key is required (X-API-Key or Authorization: Bearer)"
            )
            expect(status).to_have_class("error")
            assert cards(page) == []

            page.locator("details.key summary").click()
            page.get_by_label("API key").fill(SEARCH_KEY)
            search(page, "a cup of coffee")
            expect(status).not_to_have_class("error")
            assert len(cards(page)) == 12
            thumbnails_loaded(page)  # fetched with the key: an <img> alone would get a 401

            page.reload()
            expect(page.get_by_label("API key")).to_have_value(SEARCH_KEY)
    finally:
        drop_keys(settings)


def test_past_the_rate_limit_the_page_says_when_to_search_again(
    site: Site, page: Page, tmp_path: Path
) -> None:
    """The API's 429 message and its Retry-After in the status line; the results shown stay."""
    settings = api_settings(
        tmp_path / "data",
        site.settings.triton.url,
        site.settings.repository,
        anonymous_search=True,
        anonymous_rate_per_s=0.01,  # nothing refills while the test runs
        anonymous_burst=1,
    )
    try:
        with serving(settings, site.store) as limited:
            page.goto(limited.url)
            search(page, "a cup of coffee")
            assert len(cards(page)) == 12
            thumbnails_loaded(page)  # thumbnails are not searches: no limit on them

            search(page, "a red bicycle")
            status = page.get_by_test_id("status")
            expect(status).to_have_text(
                re.compile(
                    r"^too many searches from this address: 1 at once and 0.01 a second at "
                    r"most\. Try again in \d+ s\.$"
                )
            )
            expect(status).to_have_class("error")
    finally:
        drop_keys(settings)
