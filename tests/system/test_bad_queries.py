"""Issue 8's bad queries at the live API: each is a 4xx with a message, or a plain 200."""

from __future__ import annotations

import http.client
import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from model.triton_server import TritonServer
from query_api.schemas.search import MAX_OFFSET
from tests.support.api import SEARCH_KEY, Indexed, api_settings, indexed_api

SEARCH = {"X-API-Key": SEARCH_KEY}
PHOTOS = 12
TIMEOUT = httpx.Timeout(30.0)  # a hang fails the test instead of blocking the suite


@dataclass
class Api:
    url: str
    indexed: Indexed

    def get(self, path: str, params: Any = None) -> httpx.Response:
        return httpx.get(self.url + path, params=params, headers=SEARCH, timeout=TIMEOUT)

    def post(self, path: str, headers: dict[str, str] = SEARCH, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=headers, timeout=TIMEOUT, **kwargs)


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("bad-queries")
    settings = api_settings(tmp / "data", triton.url, repository)
    with indexed_api(settings, tmp / "photos", PHOTOS) as served:
        yield Api(served.server.url, served.indexed)


def refused(response: httpx.Response, status: int, says: str) -> None:
    """The answer is `status` with our JSON error body, whose message contains `says`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] and says in body["message"], body


def found(response: httpx.Response, count: int) -> list[str]:
    """A 200 with `count` results; their ids."""
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == count, results
    return [r["id"] for r in results]


# Each is refused the same way through GET's query string and POST's JSON body.
BAD_QUERIES: list[tuple[dict[str, Any], str]] = [
    ({"q": ""}, "q: String should have at least 1 character"),
    ({"q": " \t  "}, "the query is blank"),
    ({"q": "\u3000\u2003\u00a0"}, "the query is blank"),  # ideographic, em and no-break spaces
    ({"q": "x" * 501}, "at most 500 characters"),
    ({"q": "a\x00b"}, "control characters"),
    ({"q": "red\x1b[31mbike"}, "control characters"),  # a terminal escape
    ({"q": "bell\x07"}, "control characters"),
    ({"q": "del\x7fete"}, "control characters"),
    ({"q": "c1\x85control"}, "control characters"),
    ({"q": "cat", "limit": 0}, "limit: Input should be greater than or equal to 1"),
    ({"q": "cat", "limit": -1}, "limit: Input should be greater than or equal to 1"),
    ({"q": "cat", "limit": 10**9}, "limit: Input should be less than or equal to 100"),
    ({"q": "cat", "limit": 10**30}, "limit"),
    ({"q": "cat", "offset": -1}, "offset: Input should be greater than or equal to 0"),
    ({"q": "cat", "offset": MAX_OFFSET + 1}, "offset: Input should be less than or equal to"),
    ({"q": "cat", "colour": "red"}, "colour: Extra inputs are not permitted"),
    ({"q": "cat", "created_from": "yesterday"}, "created_from"),
    ({"q": "cat", "created_to": "2024-13-45"}, "created_to"),
    # Numbers were read as Unix times, though the schema says ISO 8601 (schemathesis, ST201).
    ({"q": "cat", "created_to": "-4.04e-178"}, "created_to: Value error, '-4.04e-178' is not an"),
    ({"q": "cat", "created_from": "1700000000"}, "is not an ISO 8601 date or time"),
    (
        {"q": "cat", "created_from": "2025-01-01T00:00:00Z", "created_to": "2024-01-01T00:00:00Z"},
        "created_from is after created_to",
    ),
    (
        {"q": "cat", "created_from": "2024-01-01T00:00:00Z", "created_to": "2025-01-01T00:00:00"},
        "give both with a time zone or none",
    ),
    ({"q": "cat", "score_threshold": 2}, "score_threshold: Input should be less than or equal"),
    ({"q": "cat", "score_threshold": -1.5}, "score_threshold"),
    ({"q": "cat", "score_threshold": "high"}, "score_threshold"),
    ({"q": "cat", "score_threshold": "nan"}, "score_threshold"),
    (
        {"q": "cat", "tags_any": [f"tag{i}" for i in range(21)]},
        "tags_any: List should have at most 20",
    ),
    ({"q": "cat", "tags_all": ["x" * 101]}, "a tag must be 1 to 100 characters"),
    ({"q": "cat", "tags_all": ["  "]}, "a tag must be 1 to 100 characters"),
    ({"q": "cat", "photographer": "p" * 201}, "photographer: String should have at most 200"),
]


@pytest.mark.parametrize(("params", "says"), BAD_QUERIES, ids=[s for _, s in BAD_QUERIES])
def test_bad_queries_are_422_with_the_reason_through_get_and_post(
    api: Api, params: dict[str, Any], says: str
) -> None:
    refused(api.get("/v1/search", params), 422, says)
    refused(api.post("/v1/search", json=params), 422, says)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # (A body past the JSON limit is refused before validation: test_api_security.)
        ({"q": "x" * 10_000}, "q: String should have at most 500 characters"),
        ({"q": {"$where": "sleep(1000)"}}, "q: Input should be a valid string"),
        ({"q": ["cat"]}, "q: Input should be a valid string"),
        ({"q": None}, "q: Input should be a valid string"),
        ({"q": "cat", "tags_any": "cat"}, "tags_any: Input should be a valid list"),
        ({"q": "cat", "tags_all": [1, 2]}, "tags_all.0: Input should be a valid string"),
        ({"q": "cat", "photographer": ["ana"]}, "photographer: Input should be a valid string"),
        ({"q": "cat", "created_from": [2024]}, "created_from"),
        ({"q": "cat", "score_threshold": {}}, "score_threshold: Input should be a valid number"),
        ({"q": "cat", "limit": "many"}, "limit: Input should be a valid integer"),
        ({"q": "cat", "limit": 2.5}, "limit: Input should be a valid integer"),
        ({"q": "cat", "offset": "1e3"}, "offset: Input should be a valid integer"),
        # JSON's \ud800 escape decodes to a lone surrogate: a str that is not text.
        ({"q": "a\ud800b"}, "q: Input should be a valid string, unable to parse raw data"),
        ({"q": "cat", "tags_any": ["\udfff"]}, "tags_any: Value error, a tag holds a lone"),
        ({"q": "cat", "tags_all": ["ok", "x\ud83d"]}, "tags_all: Value error, a tag holds a lone"),
        ({"q": "cat", "photographer": "\ud83d"}, "photographer: Input should be a valid string"),
        ({"q": "cat", "\ud800": 1}, "request: Input should be a valid string"),
        # Once a 500 (issue 33, F5): a `not` text reached the query cache's key.
        ({"q": "cat", "not": ["a\ud800"]}, "not: Value error, the query holds a lone surrogate"),
    ],
)
def test_json_bodies_of_the_wrong_shape_or_size_are_422_naming_the_field(
    api: Api, body: dict[str, Any], says: str
) -> None:
    # json.dumps escapes a lone surrogate as \ud800, as a client would; httpx's json= cannot.
    response = api.post(
        "/v1/search",
        content=json.dumps(body).encode(),
        headers={**SEARCH, "Content-Type": "application/json"},
    )
    refused(response, 422, says)


def raw_get(api: Api, target: str) -> tuple[int, str, bytes]:
    """GET with http.client, which sends a target of any length (httpx refuses past 64 kB)."""
    host, port = api.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", target, headers=SEARCH)
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


def test_a_100_kb_query_string_is_a_clean_4xx_not_a_hang(api: Api) -> None:
    # uvicorn's httptools parser (uvicorn[standard]) refuses a request head of about 80 kB
    # before the app sees it: a plain-text 400, and the connection is closed cleanly.
    status, content_type, body = raw_get(api, "/v1/search?q=" + "x" * 100_000)
    assert (status, body) == (400, b"Invalid HTTP request received."), (status, body)
    assert content_type.startswith("text/plain")
    # Below that limit the app answers, with our JSON error.
    status, content_type, body = raw_get(api, "/v1/search?q=" + "x" * 50_000)
    assert status == 422 and content_type == "application/json", (status, body)
    assert "q: String should have at most 500 characters" in json.loads(body)["message"]
    assert api.get("/v1/search", {"q": "cat"}).status_code == 200  # and it still answers


def test_a_surrogate_or_deep_nesting_is_a_4xx_and_no_traceback(api: Api) -> None:
    """Once 500s with a traceback each in api.log (issue 33, F5)."""
    # A surrogate's UTF-8 form in a query string decodes to U+FFFD: a valid, if odd, query.
    for target in ("/v1/search?q=%ED%A0%80", "/v1/search?q=cat&not=%ED%A0%80"):
        status, _, body = raw_get(api, target)
        assert status == 200, (target, body)
    deep = b"[" * 30_000 + b"]" * 30_000
    for path, says in (
        ("/v1/search/image", "nests arrays or objects more than 32 deep"),
        ("/v1/search", "error parsing the body"),
    ):
        response = api.post(
            path, content=deep, headers={**SEARCH, "Content-Type": "application/json"}
        )
        assert 400 <= response.status_code < 500, (path, response.text)
        refused(response, response.status_code, says)
    shallow = b'[[[[{"url": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}]]]]'
    response = api.post(
        "/v1/search/image", content=shallow, headers={**SEARCH, "Content-Type": "application/json"}
    )
    refused(response, 422, "must be a JSON object")


def every_script() -> dict[str, str]:
    """A few letters of every script Unicode names: the BMP and the astral planes 1 and 2.

    Python has no script property; a letter's name starts with its script's name
    (LATIN, CYRILLIC, TAMIL, CJK, EGYPTIAN ...), which groups them well enough.
    """
    scripts: dict[str, str] = {}
    for code in range(0x20, 0x2FFFF):
        char = chr(code)
        if unicodedata.category(char) not in ("Lu", "Ll", "Lo", "Lm", "Lt"):
            continue
        script = unicodedata.name(char, "?").split()[0]
        if len(scripts.get(script, "")) < 4:
            scripts[script] = scripts.get(script, "") + char
    return scripts


def test_text_in_every_unicode_script_and_emoji_is_a_valid_query(api: Api) -> None:
    scripts = every_script()
    assert len(scripts) > 150, sorted(scripts)  # Unicode 15 names ~160 scripts with letters
    assert {"LATIN", "ARABIC", "CJK", "HANGUL", "DEVANAGARI", "CUNEIFORM"} <= set(scripts)
    words = [f"{name.lower()} {letters}" for name, letters in sorted(scripts.items())]
    queries = ["🐱 on a 🚲", "👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵", "e\u0301t\u00e9 Ω Å ﬁ", "\U0001f600" * 100]
    query = ""
    for word in words:  # as few queries as fit in 500 characters each
        if len(query) + len(word) + 1 > 500:
            queries.append(query)
            query = ""
        query = f"{query} {word}".strip()
    queries.append(query)
    for q in queries:
        for response in (
            api.get("/v1/search", {"q": q, "limit": 5}),
            api.post("/v1/search", json={"q": q, "limit": 5}),
        ):
            found(response, 5)


@pytest.mark.parametrize(
    "q",
    [
        '{"$where": "sleep(1000)"}',
        '{"$ne": null}',
        "'; DROP TABLE photos; --",
        '" OR 1=1 --',
        "1' OR '1'='1",
        "<script>alert(1)</script>",
        "../../etc/passwd",
        "%00%27",
        "&lt;&amp;amp;&#0;&#x10FFFF;",
        "\\u0000",
    ],
)
def test_injection_strings_are_searched_as_plain_text(api: Api, q: str) -> None:
    found(api.get("/v1/search", {"q": q, "limit": 5}), 5)
    found(api.post("/v1/search", json={"q": q, "limit": 5}), 5)
    found(api.get("/v1/search", {"q": "cat", "limit": 100}), PHOTOS)  # nothing was dropped


def test_an_offset_past_the_last_photo_is_an_empty_page_and_past_the_maximum_is_422(
    api: Api,
) -> None:
    for offset in (PHOTOS, PHOTOS + 1, 1000, MAX_OFFSET):
        response = api.get("/v1/search", {"q": "cat", "offset": offset, "limit": 100})
        assert found(response, 0) == []
        assert response.json()["next_offset"] is None
        found(api.post("/v1/search", json={"q": "cat", "offset": offset}), 0)
    last = api.get("/v1/search", {"q": "cat", "offset": PHOTOS - 2, "limit": 5})
    assert len(found(last, 2)) == 2 and last.json()["next_offset"] is None
    refused(api.get("/v1/search", {"q": "cat", "offset": MAX_OFFSET + 1}), 422, "offset")


PAGE_AND_FILTERS: list[tuple[dict[str, Any], str]] = [
    ({"limit": 0}, "limit: Input should be greater than or equal to 1"),
    ({"limit": -1}, "limit: Input should be greater than or equal to 1"),
    ({"limit": 10**9}, "limit: Input should be less than or equal to 100"),
    ({"limit": "ten"}, "limit: Input should be a valid integer"),
    ({"offset": -1}, "offset"),
    ({"offset": MAX_OFFSET + 1}, "offset"),
    ({"colour": "red"}, "colour: Extra inputs are not permitted"),
    ({"q": "cat"}, "q: Extra inputs are not permitted"),
    ({"created_from": "yesterday"}, "created_from"),
    (
        {"created_from": "2025-01-01T00:00:00Z", "created_to": "2024-01-01T00:00:00Z"},
        "created_from is after created_to",
    ),
    ({"score_threshold": 7}, "score_threshold"),
    ({"tags_any": [f"t{i}" for i in range(21)]}, "tags_any: List should have at most 20"),
    ({"tags_all": ["y" * 101]}, "a tag must be 1 to 100 characters"),
]


@pytest.mark.parametrize(("params", "says"), PAGE_AND_FILTERS, ids=[s for _, s in PAGE_AND_FILTERS])
def test_similar_and_image_search_refuse_bad_pages_and_filters(
    api: Api, params: dict[str, Any], says: str
) -> None:
    refused(api.get("/v1/photos/photo001.jpg/similar", params), 422, says)
    image = api.indexed.files["photo002.jpg"].read_bytes()
    response = api.post("/v1/search/image", params=params, files={"file": ("a.jpg", image)})
    refused(response, 422, says)


def test_similar_and_image_search_past_the_last_photo_are_empty_pages(api: Api) -> None:
    image = api.indexed.files["photo002.jpg"].read_bytes()
    for offset in (PHOTOS - 1, 500, MAX_OFFSET):  # similar never returns the photo itself
        similar = api.get("/v1/photos/photo001.jpg/similar", {"offset": offset, "limit": 100})
        assert found(similar, 0) == [] and similar.json()["next_offset"] is None
    for offset in (PHOTOS, 500, MAX_OFFSET):
        by_image = api.post(
            "/v1/search/image", params={"offset": offset}, files={"file": ("a.jpg", image)}
        )
        assert found(by_image, 0) == [] and by_image.json()["next_offset"] is None
    tagged = api.get("/v1/photos/photo001.jpg/similar", {"tags_any": ["no-such-tag"]})
    assert found(tagged, 0) == []
