"""Driving the search page in the machine's Chromium (Debian's, never `playwright install`)."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
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
    """(id, score) of every result tile, in order, the score as the tile holds it for its
    detail view's developer section; "" where a tile has no score (a photo's near-duplicates
    are a list, not a ranking)."""
    found: list[list[str]] = page.eval_on_selector_all(
        "[data-testid=result]", "els => els.map(e => [e.dataset.id, e.dataset.score ?? ''])"
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


def more_like_this(page: Page, nth: int = 0) -> None:
    """Opens a result's detail view and follows its "More like this" (?similar=ID)."""
    page.get_by_test_id("result").nth(nth).click()
    before = started(page)
    page.get_by_test_id("detail-similar").click()
    settle(page, before)


# axe-core from the installed axe-playwright-python wheel: no network at test time.
AXE = files("axe_playwright_python").joinpath("axe.min.js")
SERIOUS = ("serious", "critical")


def accessibility_violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now, one line each
    (rule, impact, the elements' selectors)."""
    page.evaluate(AXE.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
        for v in found
        if v["impact"] in SERIOUS
    ]


def screenshot(page: Page, name: str, fallback: Path) -> Path:
    """Saves the page's screenshot as NAME.png under $PHOTOSEARCH_SCREENSHOTS, else under
    `fallback` (the test's own temporary folder)."""
    folder = Path(os.environ.get("PHOTOSEARCH_SCREENSHOTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=path)
    return path
