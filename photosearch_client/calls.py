"""The HTTP request of each call and the reading of its answer, shared by the clients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from photosearch_client.errors import ApiError
from photosearch_client.models import Event, Image

Mode = Literal["hybrid", "vector", "keyword"]
Model = TypeVar("Model", bound=BaseModel)


class SearchOptions(TypedDict, total=False):
    """The page, filters and arrangement every search takes (the API's defaults when left out).

    Every given filter must hold: `tags_any` (at least one), `tags_all` (every one),
    `photographer`, `license`, `created_from` / `created_to` (ISO 8601 or a date),
    `score_threshold` (-1..1); `auto_tags_all` (every one of the model's tags), `color` (a
    palette name or a hex colour, covering at least `color_min_share` of the photo, default
    0.05), `orientation` ("landscape", "portrait", "square"), `min_width` / `min_height`
    (pixels), `copy_space` (mostly one plain colour). `collapse` (default true): one photo
    per near-duplicate group; `diversity` (0..1): trade relevance for variety; `sort`:
    "relevance" or "newest".
    `facets` (tags, auto_tags, color, orientation, license, photographer): count their values
    among the matching photos, `facet_limit` values each (the page's `facets`).
    `boost_recency`, `boost_popularity` (0..10): add recency and popularity to each result's
    score, weighted (0: off; left out: the server's defaults).
    """

    limit: int
    offset: int
    tags_any: Sequence[str]
    tags_all: Sequence[str]
    photographer: str
    license: str
    created_from: datetime | date | str
    created_to: datetime | date | str
    score_threshold: float
    auto_tags_all: Sequence[str]
    color: str
    color_min_share: float
    orientation: Literal["landscape", "portrait", "square"]
    min_width: int
    min_height: int
    copy_space: bool
    collapse: bool
    diversity: float
    sort: Literal["relevance", "newest"]
    facets: Sequence[str]
    facet_limit: int
    boost_recency: float
    boost_popularity: float


@dataclass(frozen=True)
class Call:
    """One request: what to send, and which statuses answer with the expected body."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    json: dict[str, Any] | None = None
    files: dict[str, tuple[str, bytes]] | None = None
    answers: tuple[int, ...] = (200,)


def _value(value: object) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return [_value(v) for v in value]
    return value


def options_json(options: SearchOptions) -> dict[str, Any]:
    return {name: _value(value) for name, value in options.items()}


def options_query(options: SearchOptions) -> tuple[tuple[str, str], ...]:
    """The options as a query string: a list is its name repeated, a flag true or false."""
    params: list[tuple[str, str]] = []
    for name, value in options_json(options).items():
        for one in value if isinstance(value, list) else [value]:
            params.append((name, str(one).lower() if isinstance(one, bool) else str(one)))
    return tuple(params)


def events(events: Sequence[Event], session: str | None) -> Call:
    body: dict[str, Any] = {"events": [e.model_dump() for e in events]}
    if session is not None:
        body["session"] = session
    return Call("POST", "/v1/events", json=body, answers=(202,))


def photo_path(photo_id: str, *rest: str) -> str:
    return "/".join(["/v1/photos", quote(photo_id, safe="/"), *rest])


def text_search(
    q: str, mode: Mode | None, not_: Sequence[str], not_weight: float | None, opts: SearchOptions
) -> Call:
    body: dict[str, Any] = {"q": q, **options_json(opts)}
    if mode is not None:
        body["mode"] = mode
    if not_:
        body["not"] = list(not_)
    if not_weight is not None:
        body["not_weight"] = not_weight
    return Call("POST", "/v1/search", json=body)


def image_search(image: bytes | None, url: str | None, filename: str, opts: SearchOptions) -> Call:
    if (image is None) == (url is None):
        raise ValueError("give exactly one of the image's bytes and its url")
    params = options_query(opts)
    if image is not None:
        return Call("POST", "/v1/search/image", params, files={"file": (filename, image)})
    return Call("POST", "/v1/search/image", params, json={"url": url})


def recommend(positive: Sequence[str], negative: Sequence[str], opts: SearchOptions) -> Call:
    body = {"positive": list(positive), "negative": list(negative), **options_json(opts)}
    return Call("POST", "/v1/search/recommend", json=body)


def similar(photo_id: str, opts: SearchOptions) -> Call:
    return Call("GET", photo_path(photo_id, "similar"), options_query(opts))


def suggest(q: str, limit: int) -> Call:
    return Call("GET", "/v1/suggest", (("q", q), ("limit", str(limit))))


def check(response: httpx.Response, call: Call) -> httpx.Response:
    """The response, if its status is one the call expects; ApiError otherwise."""
    if response.status_code in call.answers:
        return response
    code, message, details = "error", response.reason_phrase, None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = str(body.get("error", code))
        message = str(body.get("message", message))
        details = body.get("details") if isinstance(body.get("details"), list) else None
    raise ApiError(response.status_code, code, message, details, _retry_after(response))


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def parse(model: type[Model], response: httpx.Response) -> Model:
    return model.model_validate_json(response.content)


def image(response: httpx.Response) -> Image:
    return Image(
        data=response.content,
        media_type=response.headers.get("Content-Type", "application/octet-stream"),
        etag=response.headers.get("ETag"),
    )
