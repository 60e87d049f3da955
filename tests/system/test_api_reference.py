"""The API reference at /docs in the machine's Chromium, against the real app.

Swagger UI, served from the app's own files, must render FastAPI's OpenAPI 3.1 schema (the
Swagger UI 4 packaged before showed "Unable to render this definition" while its scripts
loaded) and list every operation, with nothing asked of another host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from model.triton_server import TritonServer
from tests.support.api import api_settings, serving
from tests.support.browser import WAIT_MS

_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture(scope="module")
def reference(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The API's address, serving /docs and /openapi.json."""
    tmp = tmp_path_factory.mktemp("reference")
    settings = api_settings(tmp / "data", triton.url, repository, docs=True)
    with serving(settings) as server:
        yield server.url


def test_the_reference_renders_the_3_1_schema_and_lists_every_operation(
    reference: str, page: Page
) -> None:
    requested: list[str] = []
    answered: list[tuple[int, str]] = []
    console: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("response", lambda response: answered.append((response.status, response.url)))
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))

    schema = httpx.get(reference + "/openapi.json").json()
    assert schema["openapi"].startswith("3.1")
    operations = sorted(
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in _METHODS
    )
    assert ("GET", "/v1/search") in operations and ("POST", "/v1/search/image") in operations

    page.goto(reference + "/docs")
    blocks = page.locator(".opblock")
    expect(blocks).to_have_count(len(operations), timeout=WAIT_MS)
    shown = page.eval_on_selector_all(
        ".opblock",
        "els => els.map(e => [e.querySelector('.opblock-summary-method').textContent,"
        " e.querySelector('.opblock-summary-path').dataset.path])",
    )
    assert sorted((method, path) for method, path in shown) == operations
    expect(page.get_by_text("Unable to render this definition")).to_have_count(0)
    expect(page.locator(".info .title")).to_contain_text("PhotoSearch")

    # An operation opens onto its parameters, read from the 3.1 schema.
    search = page.locator(".opblock-get", has=page.locator('[data-path="/v1/search"]'))
    search.locator(".opblock-summary").first.click()
    expect(search.locator('tr[data-param-name="q"][data-param-in="query"]')).to_be_visible()

    # Everything came from the app: no CDN, no validator badge, nothing refused or missing.
    origin = urlsplit(reference).netloc
    assert requested and {urlsplit(url).netloc for url in requested} == {origin}, requested
    assert [(status, url) for status, url in answered if status >= 400] == []
    assert [line for line in console if "Content Security Policy" in line] == []


def test_only_the_files_the_reference_loads_are_served(reference: str) -> None:
    """The page's two files of the Swagger UI package; not its demo page, which names the
    petstore on another host."""
    page = httpx.get(reference + "/docs").text
    for name in ("swagger-ui.css", "swagger-ui-bundle.js"):
        assert f"/docs/static/{name}" in page
        assert httpx.get(f"{reference}/docs/static/{name}").status_code == 200, name
    for name in ("index.html", "swagger-initializer.js", "../../../../pyproject.toml"):
        assert httpx.get(f"{reference}/docs/static/{name}").status_code == 404, name
