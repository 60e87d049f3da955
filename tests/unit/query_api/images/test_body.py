"""What a search by image may send: the image as a multipart `file`, or its address as a
form field or a JSON body; anything else is a 4xx that says what to send."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from core.settings_api import ApiSettings
from query_api.http.errors import install_handlers
from query_api.images.body import read_image_query

API = ApiSettings(max_upload_bytes=1000)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = FastAPI()
    install_handlers(app, 5)

    @app.post("/image")
    async def image(request: Request) -> dict[str, object]:
        query = await read_image_query(request, API)
        return {"url": query} if isinstance(query, str) else {"bytes": len(query)}

    with TestClient(app) as test_client:
        yield test_client


def test_an_uploaded_file_is_read_whole(client: TestClient) -> None:
    answer = client.post("/image", files={"file": ("cat.jpg", b"x" * 1000, "image/jpeg")})
    assert answer.json() == {"bytes": 1000}


def test_a_file_past_the_limit_is_a_413(client: TestClient) -> None:
    answer = client.post("/image", files={"file": ("cat.jpg", b"x" * 1001, "image/jpeg")})
    assert answer.status_code == 413


def test_an_address_comes_as_a_form_field_or_a_json_body(client: TestClient) -> None:
    url = "https://images.example.com/cat.jpg"
    by_form = client.post("/image", data={"url": f"  {url} "})
    by_json = client.post("/image", json={"url": url})
    by_part = client.post("/image", files={"url": (None, url)})
    assert by_form.json() == by_json.json() == by_part.json() == {"url": url}


@pytest.mark.parametrize(
    ("send", "says"),
    [
        ({"json": {"link": "https://x"}}, "link: Extra inputs are not permitted"),
        ({"json": ["https://x"]}, "must be a JSON object"),
        ({"json": {"url": ""}}, "url: must not be empty"),
        ({"json": {"url": "https://x/\x00"}}, "control characters"),
        ({"content": b"https://x", "headers": {"Content-Type": "text/plain"}}, "neither"),
        (
            {"files": {"file": ("a.jpg", b"x", "image/jpeg"), "url": (None, "https://x")}},
            "give file or url, not both",
        ),
    ],
)
def test_anything_else_is_refused_saying_what_to_send(
    client: TestClient, send: dict[str, object], says: str
) -> None:
    answer = client.post("/image", **send)  # type: ignore[arg-type]
    assert answer.status_code == 422
    assert says in answer.json()["message"]


def test_a_body_nested_past_the_bound_is_a_422_not_a_recursion_error(client: TestClient) -> None:
    """Issue 33, F5: 30,000 levels once ended in a RecursionError and a 500."""
    deep = b"[" * 30_000 + b"]" * 30_000
    answer = client.post("/image", content=deep, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    assert "more than 32 deep" in answer.json()["message"]
    # Brackets inside a string are text, not nesting; 32 levels are only the wrong shape.
    url = "https://x/" + "[{" * 40
    assert client.post("/image", json={"url": url}).json() == {"url": url}
    nested = b"[" * 32 + b"]" * 32
    answer = client.post("/image", content=nested, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and "must be a JSON object" in answer.json()["message"]
