"""The search page as a stock-photo site, in the machine's Chromium against the real API,
Triton, Redis and store: the first result in view at desktop and phone widths, a justified
grid that keeps each photo's shape, the detail view by keyboard, the filter panel's counts,
the search box's suggestions, and axe-core's accessibility check.

The photos carry the payload fields the indexer writes (sizes, orientation, colours,
automatic tags), so the page shows what a stock site's visitor sees. Screenshots of the
results and the detail view at both widths go to $PHOTOSEARCH_SCREENSHOTS when it is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import FloatRect, Page, ViewportSize, expect

from core.payload import PhotoPayload
from core.vectorstore import GROUP_FIELD, PhotoPoint
from model.triton_server import TritonServer
from tests.support.api import Indexed, api_settings, index_photos, own_store, serving
from tests.support.browser import (
    accessibility_violations,
    cards,
    screenshot,
    search,
    settle,
    shown,
    started,
    thumbnails_loaded,
)

DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)
WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
# Pixel sizes of the photos, by index modulo 3: landscape, portrait, square.
SIZES = ((1600, 900, "landscape"), (900, 1350, "portrait"), (1000, 1000, "square"))
COLOURS = (("blue", 0.6, "white", 0.3), ("red", 0.5, "black", 0.4))
AUTO_TAGS = (("sky", "outdoor"), ("portrait", "indoor"), ("food", "table"))
# An exact copy of a photo (one near-duplicate group, which a search collapses to one result).
ORIGINAL = "photo004.jpg"
COPY = "copies/photo004.jpg"
QUERY = "a photo"


@dataclass
class Site:
    url: str
    indexed: Indexed

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        response = httpx.get(self.url + path, params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def looks(n: int, payload: PhotoPayload) -> PhotoPayload:
    """The fields the indexer adds to photo n's payload: what it looks like."""
    width, height, orientation = SIZES[n % 3]
    first, first_share, second, second_share = COLOURS[n % 2]
    words = [*str(payload["title"]).split(), *payload["tags"]]
    return {
        "width": width,
        "height": height,
        "aspect_ratio": round(width / height, 3),
        "orientation": orientation,
        "colors": [first, second],
        "color_shares": {first: first_share, second: second_share},
        "copy_space": False,
        "auto_tags": list(AUTO_TAGS[n % 3]),
        "terms": sorted(set(words)),
    }


@pytest.fixture(scope="module")
def site(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """12 real-photo variants with sizes, colours and automatic tags, and a copy of one,
    behind the API with anonymous search on, as the public page runs."""
    tmp = tmp_path_factory.mktemp("page-stock")
    settings = api_settings(tmp / "data", triton.url, repository, anonymous_search=True)
    with own_store(settings) as store:
        indexed = index_photos(store, settings, tmp / "photos", 12)
        stored = store.retrieve(indexed.collection, indexed.ids, with_vectors=True)
        points = []
        for found in stored:
            assert found.vector is not None
            n = indexed.ids.index(found.photo_id)
            payload: PhotoPayload = {
                **indexed.payloads[found.photo_id],
                **looks(n, found.payload),
            }
            if found.photo_id == ORIGINAL:
                payload[GROUP_FIELD] = ORIGINAL
                copy: PhotoPayload = {**payload, "photo_id": COPY, "title": "photo 4, a copy"}
                points.append(PhotoPoint(COPY, found.vector, copy))
            points.append(PhotoPoint(found.photo_id, found.vector, payload))
        store.upsert(indexed.collection, points)
        with serving(settings, store) as server:
            yield Site(server.url, indexed)


def query_of(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def box_of(page: Page, selector: str) -> FloatRect:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


def tiles(page: Page) -> list[dict[str, Any]]:
    """Every result tile: its id and its box on the page."""
    found: list[dict[str, Any]] = page.eval_on_selector_all(
        "[data-testid=results] > li",
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return {id: e.dataset.id, x: r.x, y: r.y, width: r.width, height: r.height}; })",
    )
    return found


def focused(page: Page, attribute: str = "testid") -> str | None:
    value: str | None = page.evaluate(f"document.activeElement?.dataset?.{attribute} ?? null")
    return value


def tab_to_first_result(page: Page) -> None:
    """Tab from the search box, through the bar and the filter panel, to the first tile."""
    page.get_by_test_id("search-input").focus()
    for _ in range(200):
        page.keyboard.press("Tab")
        if focused(page) == "result":
            return
    raise AssertionError("Tab never reached a result")


@WIDTHS
def test_the_first_result_is_in_view_and_the_grid_keeps_each_photos_shape(
    site: Site, page: Page, viewport: ViewportSize, tmp_path: Path
) -> None:
    """Without scrolling, the first result's tile is wholly inside the window; the tiles keep
    the width / height of the photo the API tells; the tiles of a row share one height; no
    score is shown; nothing is wider than the window."""
    page.set_viewport_size(viewport)
    page.goto(site.url)
    search(page, QUERY)
    body = site.api("/v1/search", q=QUERY, limit=20)
    assert cards(page) == shown(body)
    thumbnails_loaded(page)
    name = "desktop" if viewport == DESKTOP else "phone"
    screenshot(page, f"results-{name}", tmp_path)
    assert page.evaluate("window.scrollY") == 0
    first = box_of(page, "[data-testid=results] > li")
    assert first["x"] >= 0 and first["y"] >= 0
    assert first["x"] + first["width"] <= viewport["width"]
    assert first["y"] + first["height"] <= viewport["height"]
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]

    laid = tiles(page)
    by_id = {r["id"]: r for r in body["results"]}
    for tile in laid:
        attributes = by_id[tile["id"]]["attributes"]
        ratio = attributes["width"] / attributes["height"]
        assert tile["width"] / tile["height"] == pytest.approx(ratio, rel=0.03), tile
    rows: dict[int, list[float]] = {}
    for tile in laid:
        rows.setdefault(round(tile["y"]), []).append(tile["height"])
    assert len(rows) > 1
    for heights in rows.values():
        assert max(heights) - min(heights) <= 1.0, rows
    # Scores stay in the detail view's developer section: no tile shows a number.
    expect(page.locator("[data-testid=results] [data-testid=result-score]")).to_have_count(0)


def test_the_detail_view_opens_and_closes_by_keyboard(
    site: Site, page: Page, tmp_path: Path
) -> None:
    """Tab to a tile, Enter: a modal dialog with the photo's title, photographer, licence,
    tags, automatic tags, colours, size and orientation, its near-duplicates and more like
    it, as the API answers them; an opened event is sent; Tab stays inside; Escape closes it
    and the focus is back on the tile."""
    page.set_viewport_size(DESKTOP)
    page.goto(site.url)
    search(page, QUERY)
    body = site.api("/v1/search", q=QUERY, limit=20)
    tab_to_first_result(page)
    photo = body["results"][0]
    assert focused(page, "id") == photo["id"]
    with page.expect_response("**/v1/events") as answered:
        page.keyboard.press("Enter")
    assert answered.value.status == 202

    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_have_attribute("aria-modal", "true")
    expect(dialog).to_have_accessible_name(photo["metadata"]["title"])
    assert page.evaluate("document.getElementById('detail').contains(document.activeElement)")
    expect(page.get_by_test_id("detail-image")).to_have_js_property("complete", True)
    screenshot(page, "detail-desktop", tmp_path)
    meta = photo["metadata"]
    expect(page.get_by_test_id("detail-photographer")).to_have_text(meta["photographer"])
    expect(page.get_by_test_id("detail-license")).to_have_text(meta["license"])
    expect(page.get_by_test_id("detail-tags").locator("li")).to_have_text(meta["tags"])
    expect(page.get_by_test_id("detail-auto-tags").locator("li")).to_have_text(photo["auto_tags"])
    attributes = photo["attributes"]
    expect(page.get_by_test_id("detail-size")).to_have_text(
        f"{attributes['width']} \u00d7 {attributes['height']} px"
    )
    expect(page.get_by_test_id("detail-orientation")).to_have_text(attributes["orientation"])
    expect(page.get_by_test_id("detail-colors").locator("li")).to_have_text(
        [f"{c['name']} {round(c['share'] * 100)}%" for c in attributes["colors"]]
    )
    # The score is there for a developer, behind a disclosure.
    expect(page.get_by_test_id("result-score")).to_be_hidden()
    expect(page.get_by_test_id("result-score")).to_have_text(shown(body)[0][1])

    similar = site.api(f"/v1/photos/{photo['id']}/similar", limit=8)
    strip = page.get_by_test_id("detail-more").get_by_test_id("strip-photo")
    expect(strip).to_have_count(len(similar["results"]))
    assert strip.evaluate_all("els => els.map(e => e.dataset.id)") == [
        r["id"] for r in similar["results"]
    ]
    dups = site.api(f"/v1/photos/{photo['id']}/duplicates", limit=8)["photos"]
    listed = page.get_by_test_id("detail-duplicates").get_by_test_id("strip-photo")
    expect(listed).to_have_count(len(dups))

    for _ in range(40):  # round and round: the focus never leaves the dialog
        page.keyboard.press("Tab")
        assert page.evaluate("document.getElementById('detail').contains(document.activeElement)")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert focused(page) == "result" and focused(page, "id") == photo["id"]


def test_a_photos_near_duplicates_show_in_its_detail_view(site: Site, page: Page) -> None:
    """The result that stands for a photo and its copy lists the other in its detail view."""
    page.goto(site.url)
    search(page, QUERY)
    body = site.api("/v1/search", q=QUERY, limit=20)
    [grouped] = [r for r in body["results"] if r["duplicates"] is not None]
    page.locator(f"[data-testid=result][data-id='{grouped['id']}']").click()
    listed = page.get_by_test_id("detail-duplicates").get_by_test_id("strip-photo")
    expect(listed).to_have_count(1)
    [other] = {ORIGINAL, COPY} - {grouped["id"]}
    expect(listed).to_have_attribute("data-id", other)
    before = started(page)
    page.get_by_test_id("detail-all-duplicates").click()
    settle(page, before)
    assert query_of(page) == {"duplicates": [grouped["id"]]}
    assert cards(page) == [(other, "")]


@WIDTHS
def test_axe_finds_no_serious_violation_in_the_results_or_the_detail_view(
    site: Site, page: Page, viewport: ViewportSize, tmp_path: Path
) -> None:
    """axe-core (from the installed wheel) on the results, the open suggestions and filter
    panel, and the detail view: no serious or critical violation."""
    page.set_viewport_size(viewport)
    page.goto(site.url)
    search(page, QUERY)
    thumbnails_loaded(page)
    assert accessibility_violations(page) == []
    if viewport == PHONE:
        page.get_by_test_id("filters-button").click()
        expect(page.get_by_test_id("refine")).to_be_visible()
        assert accessibility_violations(page) == []
        page.get_by_test_id("filters-button").click()
    page.get_by_test_id("result").first.click()
    expect(page.get_by_test_id("detail")).to_be_visible()
    expect(page.get_by_test_id("detail-more").get_by_test_id("strip-photo").first).to_be_visible()
    assert accessibility_violations(page) == []
    if viewport == PHONE:
        screenshot(page, "detail-phone", tmp_path)


@WIDTHS
def test_choosing_a_facet_value_narrows_the_search_and_back_restores_it(
    site: Site, page: Page, viewport: ViewportSize, tmp_path: Path
) -> None:
    """The panel shows the API's facet counts; choosing a tag narrows the search (every
    result has the tag, as many as its count), names it in the URL and as a chip; Back
    shows the search before. On a phone the panel waits behind its Filters button."""
    page.set_viewport_size(viewport)
    page.goto(site.url)
    search(page, QUERY)
    before_url = page.url
    before_cards = cards(page)
    fields = "tags,auto_tags,color,orientation,license,photographer"
    body = site.api("/v1/search", q=QUERY, limit=20, facets=fields)
    counted = body["facets"]["fields"]
    panel = page.get_by_test_id("refine")
    if viewport == PHONE:
        expect(panel).to_be_hidden()
        page.get_by_test_id("filters-button").click()
    expect(panel).to_be_visible()
    for field in ("tags", "license", "photographer", "color", "orientation", "auto_tags"):
        values = page.get_by_test_id(f"facet-{field}").get_by_test_id("facet")
        expect(values).to_have_count(len(counted[field]))
        assert values.evaluate_all(
            "els => els.map(e => [e.dataset.value, Number(e.dataset.count)])"
        ) == [[v["value"], v["count"]] for v in counted[field]]
    expect(page.get_by_test_id("facet-color").locator(".swatch").first).to_be_visible()

    # A tag the near-duplicate pair lacks: a search shows the pair as one result, and the
    # counts count photos.
    pair = site.indexed.payloads[ORIGINAL]["tags"]
    tag = next(v for v in counted["tags"] if v["value"] not in pair)
    before = started(page)
    page.get_by_test_id("facet-tags").locator(f"[data-value='{tag['value']}']").click()
    settle(page, before)
    assert query_of(page) == {"q": [QUERY], "tags_all": [tag["value"]]}
    narrowed = site.api("/v1/search", q=QUERY, limit=20, tags_all=tag["value"])
    assert cards(page) == shown(narrowed)
    assert all(tag["value"] in r["metadata"]["tags"] for r in narrowed["results"])
    assert len(narrowed["results"]) == tag["count"] < len(before_cards)
    chip = page.get_by_test_id("chip")
    expect(chip).to_have_count(1)
    expect(chip).to_contain_text(tag["value"])
    chosen = page.get_by_test_id("facet-tags").locator(f"[data-value='{tag['value']}']")
    expect(chosen).to_have_attribute("aria-pressed", "true")
    name = "desktop" if viewport == DESKTOP else "phone"
    screenshot(page, f"filters-{name}", tmp_path)

    before = started(page)
    page.go_back()
    settle(page, before)
    assert page.url == before_url
    assert cards(page) == before_cards
    expect(page.get_by_test_id("chip")).to_have_count(0)

    # A chip takes its filter off again: forward to the narrowed search, then remove it.
    before = started(page)
    page.go_forward()
    settle(page, before)
    before = started(page)
    page.get_by_test_id("chip").click()
    settle(page, before)
    assert query_of(page) == {"q": [QUERY]}
    assert cards(page) == before_cards


def test_a_suggestion_is_chosen_by_keyboard_and_searched(site: Site, page: Page) -> None:
    """Typing shows GET /v1/suggest's completions in the combobox's listbox; Down marks the
    first (aria-activedescendant), Enter searches for it; Escape closes the list."""
    page.goto(site.url)
    prefix = "ci"
    expected = [s["text"] for s in site.api("/v1/suggest", q=prefix, limit=8)["suggestions"]]
    assert expected
    box = page.get_by_test_id("search-input")
    box.focus()
    page.keyboard.type(prefix)
    listbox = page.get_by_role("listbox")
    expect(listbox).to_be_visible()
    expect(box).to_have_attribute("aria-expanded", "true")
    options = listbox.get_by_role("option")
    expect(options).to_have_text([t for t in expected if t != prefix])

    page.keyboard.press("Escape")
    expect(listbox).to_be_hidden()
    expect(box).to_have_attribute("aria-expanded", "false")
    expect(box).to_have_value(prefix)

    page.keyboard.press("ArrowDown")
    expect(listbox).to_be_visible()
    first = options.first
    expect(first).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", first.get_attribute("id") or "")
    chosen = first.inner_text()
    before = started(page)
    page.keyboard.press("Enter")
    settle(page, before)
    expect(box).to_have_value(chosen)
    expect(listbox).to_be_hidden()
    assert query_of(page) == {"q": [chosen]}
    assert cards(page) == shown(site.api("/v1/search", q=chosen, limit=20))

    # And by mouse: a click on an option searches for it.
    box.fill("")
    page.keyboard.type(prefix)
    expect(options).to_have_text([t for t in expected if t != prefix])
    before = started(page)
    options.last.click()
    settle(page, before)
    clicked = [t for t in expected if t != prefix][-1]
    expect(box).to_have_value(clicked)
    assert query_of(page) == {"q": [clicked]}
