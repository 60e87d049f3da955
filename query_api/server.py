"""The HTTP server of the API: uvicorn with deadlines that slow clients cannot stretch.

uvicorn bounds idle keep-alive connections but not a request whose headers arrive a byte at
a time: three such clients once held the server's connections for as long as they liked.
Here a connection's request headers must arrive within a deadline, a request's body within
another (query_api.http.guards), and connections past a bound get 503.
"""

from __future__ import annotations

import asyncio
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from core.settings import Settings
from core.settings_api import ApiSettings


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


class RotatingLog(logging.handlers.RotatingFileHandler):
    """The API's log file, moved aside past a size, so that a flood of errors (a traceback
    each) cannot fill the disk.

    `up` points the process's stdout and stderr at the same file (what a crash at start
    writes); `follow_std` moves them to each new file as well, so that nothing goes on
    writing to one moved aside, or deleted, with no bound.
    """

    def __init__(
        self, filename: str, max_bytes: int, backups: int, follow_std: bool = False
    ) -> None:
        super().__init__(filename, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        # Never move aside what is not a regular file (/dev/stdout, a pipe), as logging's own
        # check does (bpo-45401); a path's kind does not change under a running server.
        self._regular = os.path.isfile(self.baseFilename)
        self.follow_std = follow_std
        if follow_std:
            self._point_std_here()

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record, then move the file aside if it has passed the size.

        The standard handler decides before each write, by two stats of the file's path and
        a second formatting of the record to measure it: at the peak (an access line per
        search) that was 3% of the API's CPU. Deciding after the write needs neither; a file
        may pass the size by one record.
        """
        logging.FileHandler.emit(self, record)
        try:
            stream = self.stream if self.maxBytes and self._regular else None
            if stream is not None and stream.tell() >= self.maxBytes:
                self.doRollover()
        except Exception:  # as logging does: a log that fails must not fail the request
            self.handleError(record)

    def doRollover(self) -> None:
        super().doRollover()
        if self.follow_std:
            self._point_std_here()

    def _point_std_here(self) -> None:
        if self.stream is None:
            self.stream = self._open()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd in (1, 2):
            os.dup2(self.stream.fileno(), fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), path.stat())
    except OSError:
        return False


def log_config(api: ApiSettings) -> dict[str, Any] | None:
    """logging's configuration of a log written to `api.log_file`; None: uvicorn's own
    (stderr).

    One handler for every logger: two on one file would each move it aside. uvicorn's and
    the app's loggers name it themselves, since an embedded Celery worker may replace the
    root logger's handlers with its own (on stderr, which then lands in the file anyway).
    """
    if api.log_file is None:
        return None
    path = api.log_file
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = {
        "()": RotatingLog,
        "filename": str(path),
        "max_bytes": api.log_max_bytes,
        "backups": api.log_backups,
        "follow_std": _same_file(2, path),
        "formatter": "plain",
    }
    # INFO as uvicorn's own configuration has it (a --log-level given overrides uvicorn's).
    named = {"handlers": ["file"], "level": "INFO", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        # uvicorn's access record formats as '%s - "%s %s HTTP/%s" %d': the usual line.
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"file": handler},
        "loggers": {"uvicorn": named, "uvicorn.access": named, "query_api": named},
        "root": {"handlers": ["file"], "level": "WARNING"},
    }


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
        # (query_api.http.clientaddress): uvicorn's would rewrite the peer it needs to check.
        proxy_headers=False,
        timeout_keep_alive=5,
        log_config=log_config(api) or uvicorn.config.LOGGING_CONFIG,
        **{"host": api.host, "port": api.port, **options},
    )
