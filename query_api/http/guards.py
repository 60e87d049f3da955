"""What every request passes before a route sees it: body limits and deadlines, and the
headers every answer carries (content security, framing, referrers, sniffing)."""

from __future__ import annotations

import asyncio
import json
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from query_api.http.errors import error_body

# The page has no inline script or style to keep; thumbnails fetched with a key are blob: URLs.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
_SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)


class SecurityHeaders:
    """Adds the security headers to every answer that does not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(n, v) for n, v in _SECURITY_HEADERS if n not in present]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """Refuse a body above its route's limit before it is read into memory, and a body that
    has not all arrived within the deadline (a client sending a byte at a time).

    `limits` maps a path to its limit (the image upload's is large); any other path gets
    `default_bytes`, the JSON routes' small limit: a 4 MB body of 400,000 unknown keys once
    blocked the event loop for 5 s being validated.
    """

    def __init__(
        self, app: ASGIApp, default_bytes: int, limits: dict[str, int], timeout_s: float
    ) -> None:
        self.app = app
        self.default_bytes = default_bytes
        self.limits = limits
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope["path"], self.default_bytes)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, 413, "too_large", _too_large(limit))
            return
        deadline = time.monotonic() + self.timeout_s
        seen = 0
        complete = False

        async def bounded() -> Message:
            nonlocal seen, complete
            if complete:  # later calls wait for a disconnect while the answer streams
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except TimeoutError:
                raise _refusal(
                    408, f"the request body did not arrive within {self.timeout_s:.3g} s"
                ) from None
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _refusal(413, _too_large(limit))
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, bounded, send)


def _refusal(status: int, message: str) -> HTTPException:
    # An HTTPException: FastAPI turns any other error raised while it reads the body into
    # "400 There was an error parsing the body".
    return HTTPException(status, message, headers={"Connection": "close"})


def _too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit} bytes for this route"


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})
