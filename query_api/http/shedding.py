"""Load shedding: a bound on the searches one replica has in flight, enforced before any work.

Admission control (query_api/http/admission.py) refuses a search that needs Triton once the
replica's embeddings are at their bound, but only after the request has been routed, its
parameters validated, its caller checked and its query looked up in Redis: a few
milliseconds of the one event loop that every caller shares. Far past capacity those
refusals are most of the loop's work, so the refused wait behind each other and the
admitted behind them (at three times capacity a refusal took 160-210 ms). Past this bound a
search is refused here, at once, with the same 503 and Retry-After; what the loop carries
stays what it can answer in time.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from query_api.http.errors import error_body

# Only searches are shed: they are what overload is made of. Health checks, metrics, photos
# and the admin API keep answering, so an overloaded replica still says it is alive.
SHED_PREFIXES = ("/v1/search",)


class Shedding:
    """At most `limit` search requests in flight (0: no bound); past it 503 at once."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        retry_after_s: int,
        on_shed: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.on_shed = on_shed
        self.in_flight = 0
        message = (
            f"this replica is answering {limit} searches already (its bound): "
            f"try again in {retry_after_s} s"
        )
        self._body = json.dumps(error_body("overloaded", message)).encode()
        self._headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self._body)).encode()),
            (b"retry-after", str(retry_after_s).encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.limit or scope["type"] != "http" or not scope["path"].startswith(SHED_PREFIXES):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.on_shed()
            await send({"type": "http.response.start", "status": 503, "headers": self._headers})
            await send({"type": "http.response.body", "body": self._body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
