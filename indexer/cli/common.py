"""The `photosearch index` command group, and what its commands share: the options, the
check that the settings' Redis is PhotoSearch's, the job records, the publisher of tasks, and a
task run on the worker that owns the store."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.settings import get_settings

if TYPE_CHECKING:
    from core.unreachable import Reconnecting

index_app = typer.Typer(help="Index photos: nightly sync, full reindex, rollback, status.")


class LogLevel(StrEnum):
    """Celery's log levels."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


LogLevelOption = Annotated[LogLevel, typer.Option(case_sensitive=False, help="Log level.")]

WaitOption = Annotated[bool, typer.Option("--wait", help="Follow the job with a progress bar.")]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Delete even more than PHOTOSEARCH_INDEXER__MAX_DELETE_SHARE of the live index "
        "(a job that would is refused otherwise).",
    ),
]


def reconnecting() -> Reconnecting:
    """The retries with which a command rides out a restart of its Redis, for
    PHOTOSEARCH_LIFECYCLE__RECONNECT_S, said on stderr while it waits."""
    from core.unreachable import Reconnecting

    return Reconnecting.from_settings(get_settings())


def require_photosearch() -> None:
    """Exit 2 unless the settings' Redis is PhotoSearch's: a command never writes to another
    (the machine's own Redis on 6379, say), and says how to find PhotoSearch's instead. A
    Redis that is restarting is waited for (`reconnecting`)."""
    from redis import Redis

    from core.deployment import NotPhotoSearch, require

    settings = get_settings()
    redis = Redis.from_url(settings.redis.url, socket_timeout=10, socket_connect_timeout=10)
    try:
        reconnecting()(lambda: require(redis, settings.redis.prefix))
    except NotPhotoSearch as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    finally:
        redis.close()


def jobs_of_settings() -> Any:
    from core.jobs import Jobs

    require_photosearch()
    # A deadline on each call: a Redis whose host vanished (no reset) is noticed and retried,
    # not waited on for ever.
    return Jobs.from_settings(get_settings(), socket_timeout=10, socket_connect_timeout=10)


def publisher() -> Any:
    """A Celery app that sends this command's task by name (the process ends after)."""
    from core.taskqueue import create_celery

    require_photosearch()
    return create_celery(get_settings())


def source_of(source: str | None, jobs: Any) -> str:
    """The source asked for, else the last synced or configured one, checked and normalized."""
    from core.sources import SourceError, check_source

    uri = source or jobs.recall("source") or get_settings().indexer.source
    if uri is None:
        raise typer.BadParameter("no source: pass --source or set PHOTOSEARCH_INDEXER__SOURCE")
    try:
        return check_source(str(uri), get_settings())
    except SourceError as exc:
        raise typer.BadParameter(str(exc)) from None


def call_worker(name: str, *args: Any) -> Any:
    """Run a task on the worker that owns the store and return its answer."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    sender = publisher()  # outside the try: its refusal is not the worker's
    try:
        # A command is never a task: Celery's guard against waiting inside one does not apply
        # (and trips where a task ran in this process before, as in the test suite).
        return sender.send_task(name, args=args).get(timeout=60, disable_sync_subtasks=False)
    except CeleryTimeout:
        typer.echo("no worker answered within 60 s: is `photosearch worker` running?", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # the worker's refusal, e.g. nothing to roll back to
        typer.echo(f"refused: {exc}", err=True)
        raise typer.Exit(1) from None
