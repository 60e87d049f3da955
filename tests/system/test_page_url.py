"""The search page keeps its search in its URL: shared, reopened, walked with Back and Forward.

In the machine's Chromium, against the real API, Triton, Redis and store; every check compares
what the page shows with what the JSON API answers for the same search.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.payload import PhotoPayload
from core.vectorstore import GROUP_FIELD, PhotoPoint
from model.triton_server import TritonServer
from tests.support.api import Indexed, api_settings, index_photos, own_store, serving
from tests.support.browser import cards, more_like_this, search, settle, shown, started

# An exact copy of a photo, indexed under another name (with a slash, as a source's path
# has): the two are one near-duplicate group, which a search collapses to one result.
ORIGINAL = "photo005.jpg"
COPY = "copies/photo005.jpg"


@dataclass
class Site:
    url: str
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
    """12 real-photo variants and a copy of one, behind the API with anonymous search on; an
    image search by URL may fetch from this machine (the API's own photos)."""
    tmp = tmp_path_factory.mktemp("page-url")
    settings = api_settings(
        tmp / "data",
        triton.url,
        repository,
        anonymous_search=True,
        image_url_allow=["127.0.0.1"],
    )
    with own_store(settings) as store:
        indexed = index_photos(store, settings, tmp / "photos", 12)
        [original] = store.retrieve(indexed.collection, [ORIGINAL], with_vectors=True)
        assert original.vector is not None
        payload: PhotoPayload = {**indexed.payloads[ORIGINAL], GROUP_FIELD: ORIGINAL}
        copy: PhotoPayload = {**payload, "photo_id": COPY, "title": "photo 5, a copy"}
        store.upsert(
            indexed.collection,
            [
                PhotoPoint(ORIGINAL, original.vector, payload),
                PhotoPoint(COPY, original.vector, copy),
            ],
        )
        with serving(settings, store) as server:
            yield Site(server.url, indexed)


def query_of(page: Page) -> dict[str, list[str]]:
    """The page URL's query string, each parameter's values in order."""
    return parse_qs(urlsplit(page.url).query)


def opened(page: Page, url: str) -> Page:
    """The URL in a new tab of the same browser, its search shown."""
    tab = page.context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(url)
    settle(tab, 0)
    assert errors == []
    return tab


def back(page: Page) -> None:
    before = started(page)
    page.go_back()
    settle(page, before)


def forward(page: Page) -> None:
    before = started(page)
    page.go_forward()
    settle(page, before)


def click(page: Page, selector: str) -> None:
    before = started(page)
    page.locator(selector).first.click()
    settle(page, before)


def open_section(page: Page, testid: str) -> None:
    page.get_by_test_id(testid).locator("summary").click()


def test_a_search_with_filters_and_options_is_a_url_that_shows_it_again(
    site: Site, page: Page
) -> None:
    """Every filter and option in the URL, defaults left out; the URL in a new tab fills the
    form and shows the same results, as the API answers them."""
    page.goto(site.url)
    open_section(page, "filters")
    open_section(page, "options")
    page.get_by_label("Any of these tags").fill("cat, night")
    page.get_by_label("Created from").fill("2024-01-11")
    page.get_by_label("Per page").select_option("10")
    page.get_by_label("Match by").select_option("vector")
    page.get_by_test_id("not").fill("a dog, a busy street")
    page.get_by_label("Sort by").select_option("newest")
    page.get_by_test_id("diversity").fill("0.5")
    page.get_by_test_id("collapse").uncheck()
    query = "a cat asleep at night"
    search(page, query)

    assert query_of(page) == {
        "q": [query],
        "mode": ["vector"],
        "not": ["a dog", "a busy street"],
        "tags_any": ["cat", "night"],
        "created_from": ["2024-01-11"],
        "limit": ["10"],
        "collapse": ["false"],
        "diversity": ["0.5"],
        "sort": ["newest"],
    }
    body = site.api(
        "/v1/search",
        q=query,
        mode="vector",
        tags_any=["cat", "night"],
        created_from="2024-01-11T00:00:00",  # a whole day, from its start
        limit=10,
        collapse="false",
        diversity=0.5,
        sort="newest",
        **{"not": ["a dog", "a busy street"]},
    )
    assert body["results"] and body["mode"] == "vector"
    assert cards(page) == shown(body)
    expect(page.get_by_test_id("status")).to_contain_text("vector search")

    tab = opened(page, page.url)
    assert cards(tab) == shown(body)
    expect(tab.get_by_test_id("search-input")).to_have_value(query)
    expect(tab.get_by_test_id("mode")).to_have_value("vector")
    expect(tab.get_by_test_id("not")).to_have_value("a dog, a busy street")
    expect(tab.get_by_label("Any of these tags")).to_have_value("cat, night")
    expect(tab.get_by_label("Created from")).to_have_value("2024-01-11")
    expect(tab.get_by_label("Per page")).to_have_value("10")
    expect(tab.get_by_test_id("collapse")).not_to_be_checked()
    expect(tab.get_by_test_id("diversity")).to_have_value("0.5")
    expect(tab.get_by_test_id("sort")).to_have_value("newest")
    # What the URL sets is in view: both sections open.
    expect(tab.get_by_test_id("filters")).to_have_attribute("open", "")
    expect(tab.get_by_test_id("options")).to_have_attribute("open", "")
    expect(tab).to_have_title(f"Results for “{query}” · PhotoSearch")


def test_back_and_forward_walk_the_searches_and_more_like_this(site: Site, page: Page) -> None:
    """Each search is a history entry: Back shows the one before with its form and results,
    Forward the next; "more like this" is one too (?similar=ID), and Back returns from it."""
    page.goto(site.url)
    first = "a red bicycle"
    search(page, first)
    first_url = page.url
    first_cards = cards(page)
    assert first_cards == shown(site.api("/v1/search", q=first, limit=20))

    open_section(page, "filters")
    page.get_by_label("Photographer").fill("ana")
    second = "a cup of coffee"
    search(page, second)
    second_url = page.url
    assert query_of(page) == {"q": [second], "photographer": ["ana"]}
    second_cards = cards(page)
    assert second_cards == shown(site.api("/v1/search", q=second, photographer="ana", limit=20))
    assert second_cards != first_cards

    back(page)
    assert page.url == first_url
    assert cards(page) == first_cards
    expect(page.get_by_test_id("search-input")).to_have_value(first)
    expect(page.get_by_label("Photographer")).to_have_value("")
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Results for “{first}”")

    forward(page)
    assert page.url == second_url
    assert cards(page) == second_cards
    expect(page.get_by_test_id("search-input")).to_have_value(second)
    expect(page.get_by_label("Photographer")).to_have_value("ana")

    target = second_cards[0][0]
    title = site.indexed.payloads[target]["title"]
    more_like_this(page)
    assert query_of(page) == {"similar": [target], "photographer": ["ana"]}
    similar = site.api(f"/v1/photos/{target}/similar", photographer="ana", limit=20)
    assert cards(page) == shown(similar)
    expect(page.get_by_test_id("results-heading")).to_have_text(f"More like {title}")
    expect(page.get_by_test_id("results-heading")).to_be_focused()

    # Opened from its URL, the page asks the API for the photo's title.
    tab = opened(page, page.url)
    assert cards(tab) == shown(similar)
    expect(tab.get_by_test_id("results-heading")).to_have_text(f"More like {title}")

    back(page)
    assert page.url == second_url
    assert cards(page) == second_cards
    back(page)
    assert page.url == first_url
    assert cards(page) == first_cards


def test_more_results_name_their_page_in_the_url_without_a_history_entry(
    site: Site, page: Page
) -> None:
    """ "More results" replaces the URL with its offset (Back leaves the search, not a page of
    it); the URL in a new tab shows every page its sender saw."""
    page.goto(site.url)
    search(page, "a rocket")  # the entry that Back returns to
    before_url = page.url
    open_section(page, "filters")
    page.get_by_label("Per page").select_option("10")
    query = "a photo"
    search(page, query)
    entries = page.evaluate("history.length")
    click(page, "[data-testid=more-results]")
    assert query_of(page) == {"q": [query], "limit": ["10"], "offset": ["10"]}
    assert page.evaluate("history.length") == entries
    first = site.api("/v1/search", q=query, limit=10)
    rest = site.api("/v1/search", q=query, limit=10, offset=10)
    assert rest["next_offset"] is None
    everything = shown(first) + shown(rest)
    assert cards(page) == everything
    expect(page.get_by_test_id("more-results")).to_be_hidden()

    tab = opened(page, page.url)
    assert cards(tab) == everything
    expect(tab.get_by_test_id("more-results")).to_be_hidden()
    expect(tab.get_by_test_id("status")).to_contain_text(f"{len(everything)} results")

    back(page)
    assert page.url == before_url


def test_a_result_with_near_duplicates_opens_them(site: Site, page: Page) -> None:
    """A photo and its copy are one result that offers "+1 similar shot"; it opens
    ?duplicates=ID, which lists the API's near-duplicates of the photo; Back returns."""
    page.goto(site.url)
    query = "a photo"
    search(page, query)
    body = site.api("/v1/search", q=query, limit=20)
    assert cards(page) == shown(body)
    grouped = [r for r in body["results"] if r["duplicates"] is not None]
    assert len(grouped) == 1
    [result] = grouped
    assert result["id"] in (ORIGINAL, COPY)
    assert result["duplicates"]["count"] == 1
    [other] = {ORIGINAL, COPY} - {result["id"]}
    assert result["duplicates"]["ids"] == [other]
    links = page.get_by_test_id("duplicates")
    expect(links).to_have_count(1)
    expect(links).to_have_text("+1 similar shot")
    search_url = page.url

    click(page, "[data-testid=duplicates]")
    assert query_of(page) == {"duplicates": [result["id"]]}
    listed = site.api(f"/v1/photos/{result['id']}/duplicates")
    assert [p["id"] for p in listed["photos"]] == [other]
    assert cards(page) == [(other, "")]  # a list of the group, not a ranking: no scores
    title = result["metadata"]["title"]
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Similar shots of {title}")
    expect(page.get_by_test_id("status")).to_have_text("1 similar shot")

    tab = opened(page, page.url)
    assert cards(tab) == [(other, "")]
    expect(tab.get_by_test_id("results-heading")).to_have_text(f"Similar shots of {title}")

    back(page)
    assert page.url == search_url
    assert cards(page) == shown(body)


def test_liked_and_not_liked_photos_search_more_like_these(site: Site, page: Page) -> None:
    """Like and Not like mark cards (one mark a photo); "More like these, not like those" puts
    the marks in the URL (?like=&unlike=) and shows the API's recommendation."""
    page.goto(site.url)
    query = "a photo"
    search(page, query)
    ids = [i for i, _ in cards(page)]
    search_url = page.url

    def mark(photo_id: str, kind: str) -> None:
        page.locator(f"li[data-id='{photo_id}'] [data-testid={kind}]").click()

    summary = page.get_by_test_id("marks-summary")
    expect(page.get_by_test_id("marks")).to_be_hidden()
    mark(ids[3], "unlike")
    expect(summary).to_have_text("0 liked · 1 not liked: like a photo to search by them")
    expect(page.get_by_test_id("recommend")).to_be_disabled()
    mark(ids[3], "like")  # switches the mark
    mark(ids[3], "like")  # and takes it off
    expect(page.get_by_test_id("marks")).to_be_hidden()
    mark(ids[0], "like")
    mark(ids[1], "like")
    mark(ids[2], "unlike")
    liked = page.locator(f"li[data-id='{ids[0]}'] [data-testid=like]")
    expect(liked).to_have_attribute("aria-pressed", "true")
    expect(summary).to_have_text("2 liked · 1 not liked")

    click(page, "[data-testid=recommend]")
    assert query_of(page) == {"like": [ids[0], ids[1]], "unlike": [ids[2]]}
    body = site.api("/v1/search/recommend", positive=[ids[0], ids[1]], negative=[ids[2]], limit=20)
    assert body["results"]
    assert cards(page) == shown(body)
    heading = page.get_by_test_id("results-heading")
    expect(heading).to_have_text("More like 2 liked photos, not like 1")
    expect(heading).to_be_focused()

    tab = opened(page, page.url)
    assert cards(tab) == shown(body)
    expect(tab.get_by_test_id("marks-summary")).to_have_text("2 liked · 1 not liked")

    back(page)
    assert page.url == search_url
    assert [i for i, _ in cards(page)] == ids
    expect(liked).to_have_attribute("aria-pressed", "true")  # marks stay until cleared
    page.get_by_test_id("clear-marks").click()
    expect(liked).to_have_attribute("aria-pressed", "false")
    expect(page.get_by_test_id("marks")).to_be_hidden()


def test_search_by_image_address_and_by_upload_are_history_entries(site: Site, page: Page) -> None:
    """An image's address is a search in the URL (?image_url=); an upload is an entry that
    Back and Forward return to while the page holds the file; a refused address shows the
    API's message."""
    page.goto(site.url)
    photo_id = site.indexed.ids[7]
    address = f"{site.url}/v1/photos/{photo_id}/image"
    page.get_by_test_id("by-photo").click()  # the bar's "search by photo" opens its panel
    box = page.get_by_label("or by image address")
    box.fill(address)
    before = started(page)
    box.press("Enter")
    settle(page, before)
    assert query_of(page) == {"image_url": [address]}
    response = httpx.post(
        site.url + "/v1/search/image", params={"limit": 20}, json={"url": address}
    )
    assert response.status_code == 200, response.text
    found = cards(page)
    assert found[0][0] == photo_id
    assert found == shown(response.json())
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Photos like {address}")
    address_url = page.url

    upload = site.indexed.ids[2]
    path = site.indexed.files[upload]
    before = started(page)
    page.get_by_label("Search by image").set_input_files(path)
    settle(page, before)
    uploaded = cards(page)
    assert uploaded[0][0] == upload
    assert query_of(page) == {}
    back(page)
    assert page.url == address_url
    assert cards(page) == found
    forward(page)
    assert cards(page) == uploaded
    expect(page.get_by_test_id("results-heading")).to_have_text(f"Photos like {path.name}")

    refused = "file:///etc/passwd"
    page.get_by_test_id("by-photo").click()
    box.fill(refused)
    before = started(page)
    page.get_by_test_id("image-url-button").click()
    settle(page, before)
    answer = httpx.post(site.url + "/v1/search/image", json={"url": refused})
    assert 400 <= answer.status_code < 500
    status = page.get_by_test_id("status")
    expect(status).to_have_text(answer.json()["message"])
    expect(status).to_have_class("error")
