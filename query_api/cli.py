"""`photosearch api serve` and `photosearch api key`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from core.settings import Settings, get_settings

if TYPE_CHECKING:
    from query_api.app import StartCompanion

api_app = typer.Typer(help="The query API and the search page.")


class _QuietProbes(logging.Filter):
    """Successful health probes (a supervisor's or a load balancer's, every few seconds) would
    bury the requests worth reading in the access log."""

    PATHS = ("/healthz", "/readyz")

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access record: (client, method, path, http version, status)
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            return not (args[2] in self.PATHS and args[4] == 200)
        return True


def serve(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    log_level: str = "info",
    companions: Sequence[StartCompanion] = (),
) -> None:
    """Serve the API (and its companions) until the process is told to stop."""
    import uvicorn

    from query_api.app import create_app
    from query_api.server import server_config

    logging.getLogger("uvicorn.access").addFilter(_QuietProbes())
    config = server_config(
        create_app(settings, companions=companions),
        settings,
        host=host or settings.api.host,
        port=port or settings.api.port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run()


HostOption = Annotated[
    str | None, typer.Option(help="Listen address.", show_default="PHOTOSEARCH_API__HOST")
]
PortOption = Annotated[
    int | None, typer.Option(help="Listen port.", show_default="PHOTOSEARCH_API__PORT")
]


class LogLevel(StrEnum):
    """uvicorn's log levels."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"
    TRACE = "trace"


class Scope(StrEnum):
    """What an API key may do."""

    SEARCH = "search"
    ADMIN = "admin"


LogLevelOption = Annotated[LogLevel, typer.Option(case_sensitive=False, help="Log level.")]


@api_app.command("serve")
def serve_command(
    host: HostOption = None, port: PortOption = None, log_level: LogLevelOption = LogLevel.INFO
) -> None:
    """Serve the API and the page (one process; run replicas behind a load balancer)."""
    serve(get_settings(), host=host, port=port, log_level=log_level.value)


@api_app.command("key")
def key_command(
    name: Annotated[str, typer.Argument(help="Who gets the key (shown in the metrics).")],
    scope: Annotated[
        list[Scope] | None,
        typer.Option(
            "--scope", help="What the key may do; repeat for both.", show_default="search"
        ),
    ] = None,
) -> None:
    """Make a key: give the key to the caller, put the JSON line in PHOTOSEARCH_API__KEYS."""
    from core.settings_api import ApiKey
    from query_api.http.auth import hash_key, new_key

    scopes = tuple(s.value for s in scope or [Scope.SEARCH])
    key = new_key()
    entry = ApiKey(name=name, sha256=hash_key(key), scopes=scopes)
    typer.echo(f"key (shown once): {key}")
    typer.echo(f"config entry:     {json.dumps(entry.model_dump(mode='json', exclude_none=True))}")
