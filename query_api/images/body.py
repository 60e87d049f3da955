"""What a search by image sends: the image itself (a multipart `file`), or its address (`url`:
a multipart or urlencoded form field, or a JSON body {"url": ...}); how OpenAPI says so; and
whom a fetch of that address counts against."""

from __future__ import annotations

import json
import re
import unicodedata
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.datastructures import UploadFile

from core.settings_api import ApiSettings
from query_api.http.auth import ANONYMOUS
from query_api.http.errors import ApiError
from query_api.http.ratelimit import address_bucket
from query_api.images.fetch import MAX_URL_LENGTH

_FILE = {
    "type": "string",
    "contentMediaType": "application/octet-stream",
    "description": "A JPEG, PNG, WebP, GIF or TIFF image.",
}
_URL = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_URL_LENGTH,
    "description": "An http or https URL of the image, fetched by the API: public addresses "
    "only, redirects followed (at most 5), the same size limit as an upload.",
}
_URL_ONLY = {
    "title": "ImageUrl",
    "type": "object",
    "properties": {"url": _URL},
    "required": ["url"],
    "additionalProperties": False,
}
_URL_EXAMPLE = {"url": "https://images.example.com/2024/06/red-bicycle.jpg"}
# The request body of POST /v1/search/image, for the route's `openapi_extra`: the body is
# read by hand (read_image_query), since no one FastAPI parameter takes all three forms.
OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The image, uploaded as `file`, or its address as `url`: exactly one.",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "title": "ImageUploadOrUrl",
                    "type": "object",
                    "properties": {"file": _FILE, "url": _URL},
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": False,
                }
            },
            "application/x-www-form-urlencoded": {"schema": _URL_ONLY, "example": _URL_EXAMPLE},
            "application/json": {"schema": _URL_ONLY, "example": _URL_EXAMPLE},
        },
    }
}
# Keeps "file: Field required", the answer before a URL could be given.
_NEITHER = (
    "file: Field required, or url: send the image as a multipart field `file`, or its "
    'address as `url` (a form field, or a JSON body {"url": ...})'
)
_MAX_FORM_FIELDS = 4
MAX_JSON_DEPTH = 32
# A JSON string, escapes and all (an unterminated one is left, and json.loads refuses it).
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


async def read_image_query(request: Request, api: ApiSettings) -> bytes | str:
    """The uploaded image's bytes, or the URL to fetch it from; ApiError (4xx) otherwise."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == "multipart/form-data":
        return await _multipart(request, api.max_upload_bytes)
    if media == "application/x-www-form-urlencoded":
        return _url_of(_urlencoded(await _small_body(request, api.max_json_bytes)))
    if media == "application/json":
        return _url_of(_json_object(await _small_body(request, api.max_json_bytes)))
    raise ApiError(422, _NEITHER + (f"; Content-Type {media[:100]} is neither" if media else ""))


def fetch_caller(request: Request) -> str:
    """Whom a fetch by URL counts against (ImageFetcher's per-caller bound), as the rate
    limits tell callers apart: the key, or without one the client's address (IPv6: its /64)."""
    caller = getattr(request.state, "caller", None)
    name = getattr(caller, "name", ANONYMOUS)
    if name != ANONYMOUS:
        return f"key:{name}"
    return address_bucket(request.client.host if request.client else "unknown")


async def _multipart(request: Request, max_bytes: int) -> bytes | str:
    # A malformed body, or more parts than these, is a 400 from the parser.
    async with request.form(max_files=_MAX_FORM_FIELDS, max_fields=_MAX_FORM_FIELDS) as form:
        names = list(dict.fromkeys(form.keys()))
        _known_once(names, [len(form.getlist(name)) for name in names], ("file", "url"))
        if "file" in names and "url" in names:
            raise ApiError(422, "give file or url, not both")
        if "url" in names:
            url = form["url"]
            if not isinstance(url, str):
                raise ApiError(422, "url: a text field, not a file")
            return _checked_url(url)
        if "file" not in names:
            raise ApiError(422, _NEITHER)
        upload = form["file"]
        if not isinstance(upload, UploadFile):
            raise ApiError(422, "file: a file (a part with a filename), not a text field")
        data = await upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ApiError(413, f"the image is larger than the limit of {max_bytes} bytes")
    return data


def _known_once(names: list[str], counts: list[int], known: tuple[str, ...]) -> None:
    for name, count in zip(names, counts, strict=True):
        if name not in known:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise ApiError(422, f"{shown}: Extra inputs are not permitted (send {known[-1]})")
        if count > 1:
            raise ApiError(422, f"{name}: give it once")


async def _small_body(request: Request, limit: int) -> bytes:
    """A form's or JSON's body, refused past `limit` as it arrives (the route's own limit
    is an upload's)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"a body holding a url is limited to {limit} bytes")
    return bytes(body)


def _urlencoded(body: bytes) -> dict[str, Any]:
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            errors="strict",
            max_num_fields=_MAX_FORM_FIELDS,
        )
    except ValueError as exc:  # not UTF-8, or too many fields
        raise ApiError(422, f"the form body cannot be read: {exc}") from None
    names = list(dict.fromkeys(name for name, _ in pairs))
    _known_once(names, [sum(n == name for n, _ in pairs) for name in names], ("url",))
    return dict(pairs)


def _json_depth(body: bytes) -> int:
    """How deeply the body's arrays and objects nest (brackets inside strings not counted)."""
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    steps = brackets.translate(_DEPTH_STEPS)  # b"\x02" opens, b"\x00" closes
    return max(accumulate(step - 1 for step in steps), default=0)


def _json_object(body: bytes) -> dict[str, Any]:
    # The parser recurses once per level: 30,000 levels (60 KB) once ended in a
    # RecursionError and a 500. What is asked for is {"url": ...}, one level.
    opened = body.count(b"[") + body.count(b"{")
    if opened > MAX_JSON_DEPTH and _json_depth(body) > MAX_JSON_DEPTH:
        raise ApiError(
            422,
            f"the body nests arrays or objects more than {MAX_JSON_DEPTH} deep; "
            'send {"url": ...}',
        )
    try:
        value = json.loads(body)
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ApiError(422, f"the body is not JSON: {exc}") from None
    except RecursionError:  # what the depth check missed, if anything: still the caller's
        raise ApiError(422, "the body is not JSON: it nests too deeply") from None
    if not isinstance(value, dict):
        raise ApiError(422, 'the body must be a JSON object: {"url": ...}')
    _known_once(list(value), [1] * len(value), ("url",))
    return value


def _url_of(fields: dict[str, Any]) -> str:
    if "url" not in fields:
        raise ApiError(422, _NEITHER)
    url = fields["url"]
    if not isinstance(url, str):
        raise ApiError(422, "url: Input should be a valid string")
    return _checked_url(url)


def _checked_url(url: str) -> str:
    url = url.strip()
    if not url:
        raise ApiError(422, "url: must not be empty")
    if len(url) > MAX_URL_LENGTH:
        raise ApiError(422, f"url: at most {MAX_URL_LENGTH} characters")
    # Control characters and lone surrogates: nothing a URL holds, and a surrogate cannot
    # even be encoded to be sent.
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in url):
        raise ApiError(422, "url: control characters or lone surrogates are not allowed")
    return url
