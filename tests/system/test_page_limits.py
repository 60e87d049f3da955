"""The search page at its edges, in the machine's Chromium against the real API: queries and
addresses longer than any word, the API's validation errors, and the favicon.

A page URL can hold what the form cannot (a 600-character query without a space): the page
must still fit the window at desktop and phone widths, and say in words what the API refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, ViewportSize, expect

from model.triton_server import TritonServer
from query_api.schemas.search import MAX_NOT, MAX_QUERY_CHARS
from tests.support.api import Served, api_settings, indexed_api
from tests.support.browser import settle

DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)
WIDEST = "document.documentElement.scrollWidth"


@pytest.fixture(scope="module")
def site(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """Three photos behind the API with anonymous search on, as the public page runs."""
    tmp = tmp_path_factory.mktemp("page-limits")
    settings = api_settings(tmp / "data", triton.url, repository, anonymous_search=True)
    with indexed_api(settings, tmp / "photos", 3) as served:
        yield served


def shown(page: Page, url: str) -> None:
    """Opens a page URL and waits until its search was answered."""
    page.goto(url)
    settle(page, 0)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_long_words_in_a_query_or_address_stay_inside_the_window(
    site: Served, page: Page, viewport: ViewportSize
) -> None:
    """Every place that echoes the visitor's words (the heading, the title, the status line)
    breaks a word longer than the window instead of widening the page (600 characters once
    made it 9,384 px wide)."""
    page.set_viewport_size(viewport)
    url = site.server.url
    heading = page.get_by_test_id("results-heading")
    status = page.get_by_test_id("status")

    valid = "x" * MAX_QUERY_CHARS  # answered: results under the heading that echoes it
    shown(page, f"{url}/?q={valid}")
    expect(heading).to_have_text(f"Results for “{valid}”")
    expect(status).to_contain_text("3 results")
    assert page.evaluate(WIDEST) <= viewport["width"]

    too_long = "y" * 600  # refused by the API: echoed in the heading, explained below
    shown(page, f"{url}/?q={too_long}")
    expect(heading).to_have_text(f"Results for “{too_long}”")
    expect(status).to_have_class("error")
    assert page.evaluate(WIDEST) <= viewport["width"]

    # An address (refused: loopback) and a photo id are echoed too.
    address = "http://127.0.0.1:1/" + "z" * 600
    shown(page, f"{url}/?image_url={address}")
    expect(heading).to_have_text(f"Photos like {address}")
    expect(status).to_have_class("error")
    assert page.evaluate(WIDEST) <= viewport["width"]

    photo = "w" * 600
    shown(page, f"{url}/?similar={photo}")
    expect(heading).to_have_text(f"More like {photo}")
    assert page.evaluate(WIDEST) <= viewport["width"]


def test_the_apis_validation_errors_read_as_sentences(site: Served, page: Page) -> None:
    """A 422 is told in the page's words, mapped from the API's details (field and type);
    a detail the page has no words for keeps the API's own text."""
    url = site.server.url
    status = page.get_by_test_id("status")
    too_long = "y" * (MAX_QUERY_CHARS + 100)

    api = httpx.get(f"{url}/v1/search", params={"q": too_long})
    assert api.status_code == 422
    assert api.json()["message"] == f"q: String should have at most {MAX_QUERY_CHARS} characters"
    assert [(d["loc"], d["type"]) for d in api.json()["details"]] == [
        (["query", "q"], "string_too_long")
    ]
    shown(page, f"{url}/?q={too_long}")
    expect(status).to_have_text(f"Your search is too long: at most {MAX_QUERY_CHARS} characters.")
    expect(status).to_have_class("error")

    shown(page, f"{url}/?q=cat&not={'n' * (MAX_QUERY_CHARS + 1)}")
    expect(status).to_have_text(
        f"A “not like” description is too long: at most {MAX_QUERY_CHARS} characters."
    )
    nots = "&".join(f"not=thing{i}" for i in range(MAX_NOT + 1))
    shown(page, f"{url}/?q=cat&{nots}")
    expect(status).to_have_text(f"Too many “not like” descriptions: at most {MAX_NOT}.")
    shown(page, f"{url}/?q=cat&score_threshold=2")
    expect(status).to_have_text("The minimum similarity must be less than or equal to 1.")

    # No words for this one: the API's own text, as a sentence.
    shown(page, f"{url}/?q=cat&sort=sideways")
    expect(status).to_have_text("sort: Input should be 'relevance' or 'newest'.")

    # The form itself stops at the API's limit.
    box = page.get_by_test_id("search-input")
    box.fill("")
    box.focus()
    page.keyboard.insert_text("q" * (MAX_QUERY_CHARS + 100))
    expect(box).to_have_value("q" * MAX_QUERY_CHARS)


def test_the_page_asks_for_no_missing_file(site: Served, page: Page) -> None:
    """The page's icon and /favicon.ico (which a browser asks for when a page links no icon,
    and tools ask for regardless) load under the page's security policy, and nothing the
    page loads answers 404: every load once asked for a missing /favicon.ico.

    Headless Chromium shows no favicon, so the page loads both as images, as a browser's tab
    would; the responses are recorded as the page sees them.
    """
    url = site.server.url
    answered: dict[str, int] = {}
    page.on("response", lambda response: answered.update({response.url: response.status}))
    shown(page, f"{url}/?q=a+red+bicycle")
    page.wait_for_load_state("load")

    icons = [
        page.evaluate(
            "() => document.querySelector('link[rel~=icon]')?.href"
            " ?? new URL('/favicon.ico', location).href"
        ),
        f"{url}/favicon.ico",
    ]
    for icon in icons:
        # A query of its own: Chromium may hold the icon from a fetch of its own that the
        # page never sees; this load must reach the server and be recorded.
        with page.expect_response(icon + "?load") as response:
            loaded = page.evaluate(
                """href => new Promise(done => {
                     const img = new Image();
                     img.onload = () => done(img.naturalWidth > 0);
                     img.onerror = () => done(false);
                     img.src = href;
                   })""",
                icon + "?load",
            )
        assert response.value.status == 200, (icon, response.value.status)
        assert loaded, f"the icon {icon} did not load under the page's policy"
    assert {u: s for u, s in answered.items() if s >= 400} == {}
    assert icons[0] == f"{url}/static/favicon.svg"

    for icon, kind in zip(icons, ("image/svg+xml", "image/vnd.microsoft.icon"), strict=True):
        answer = httpx.get(icon)
        assert answer.headers["content-type"].startswith(kind), answer.headers
