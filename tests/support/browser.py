"""Driving the search page in the machine's Chromium (Debian's, never `playwright install`)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
WAIT_MS = 15_000
# The grid counts the searches it started and is aria-busy while one runs.
SETTLED = """n => {
  const grid = document.querySelector('[data-testid=results]');
  return Number(grid.dataset.requests || 0) > n && !grid.hasAttribute('aria-busy');
}"""


def started(page: Page) -> int:
    return int(page.get_by_test_id("results").get_attribute("data-requests") or 0)


def settle(page: Page, before: int) -> None:
    """Until a search started after `before` has been answered and shown."""
    page.wait_for_function(SETTLED, arg=before, timeout=WAIT_MS)


def search(page: Page, q: str) -> None:
    before = started(page)
    box = page.get_by_test_id("search-input")
    box.fill(q)
    box.press("Enter")
    settle(page, before)


def cards(page: Page) -> list[tuple[str, str]]:
    """(id, shown score) of every result card, in order; "" where a card has no score (a
    photo's near-duplicates are a list, not a ranking)."""
    found: list[list[str]] = page.eval_on_selector_all(
        "[data-testid=result]",
        "els => els.map(e => [e.dataset.id, e.querySelector('[data-testid=result-score]')"
        "?.textContent ?? ''])",
    )
    return [(i, s) for i, s in found]


def shown(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(id, score) of an API answer as the page should show them: "z" leaves no "-0.000"."""
    return [(r["id"], f"{r['score']:z.3f}") for r in body["results"]]


def thumbnails_loaded(page: Page) -> None:
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=result] img')]"
        ".every(i => i.complete && i.naturalWidth > 0)",
        timeout=WAIT_MS,
    )
