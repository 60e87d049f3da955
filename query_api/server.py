"""The HTTP server of the API: uvicorn with deadlines that slow clients cannot stretch.

uvicorn bounds idle keep-alive connections but not a request whose headers arrive a byte at
a time: three such clients once held the server's connections for as long as they liked.
Here a connection's request headers must arrive within a deadline, a request's body within
another (query_api.guards), and connections past a bound get 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from core.settings import Settings


class _HeaderDeadline(HttpToolsProtocol):
    """Closes a connection whose request line and headers do not all arrive in time."""

    header_timeout_s = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is closed too

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        # Idle between requests: uvicorn's keep-alive timeout takes over until the next byte.
        self._disarm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration of the API: its deadlines and its bound on concurrency."""
    api = settings.api
    protocol = type(
        "HeaderDeadline", (_HeaderDeadline,), {"header_timeout_s": api.header_timeout_s}
    )
    return uvicorn.Config(
        app,
        http=protocol,
        # Past this many connections and requests at once, 503 at once instead of a queue.
        limit_concurrency=api.max_connections,
        # The app finds the client's address itself, from its own settings
        # (query_api.clientaddress): uvicorn's would rewrite the peer it needs to check.
        proxy_headers=False,
        timeout_keep_alive=5,
        **{"host": api.host, "port": api.port, **options},
    )
