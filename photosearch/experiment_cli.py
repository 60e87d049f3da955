"""`photosearch experiment ...`: start an interleaved experiment between the live collection and
a candidate, read its wins, losses, ties and sign test, end it with a decision."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.settings import get_settings

if TYPE_CHECKING:
    from core.unreachable import Reconnecting

experiment_app = typer.Typer(
    help="Interleaved experiments: a share of searches ranks with a candidate collection too.",
    no_args_is_help=True,
)


class DecisionChoice(StrEnum):
    """What an experiment ends with."""

    SWITCH = "switch"
    DROP = "drop"


def _reconnecting() -> Reconnecting:
    """Retries of what a lost Redis interrupted (PHOTOSEARCH_LIFECYCLE__RECONNECT_S): reads and
    the check before a write, never the write itself, which might have happened."""
    from core.unreachable import Reconnecting

    return Reconnecting.from_settings(get_settings())


def _redis() -> Any:
    """PhotoSearch's Redis (exit 2 unless its marker is there): the experiment's records. One
    restarting is waited for."""
    from redis import Redis

    from core.deployment import NotPhotoSearch, require

    settings = get_settings()
    redis = Redis.from_url(settings.redis.url, socket_timeout=10, socket_connect_timeout=10)
    try:
        _reconnecting()(lambda: require(redis, settings.redis.prefix))
    except NotPhotoSearch as exc:
        redis.close()
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    return redis


def _collections() -> list[dict[str, Any]]:
    """The collections and their roles, as the worker that owns the store answers."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from core.taskqueue import COLLECTIONS, create_celery

    def ask() -> list[dict[str, Any]]:
        publisher = create_celery(get_settings())
        try:
            # A command is never a task: Celery's guard against waiting inside one does not
            # apply.
            found: list[dict[str, Any]] = publisher.send_task(COLLECTIONS).get(
                timeout=60, disable_sync_subtasks=False
            )
        finally:
            publisher.close()
        return found

    try:
        return _reconnecting()(ask)  # asked again of a Redis that restarted: it only reads
    except CeleryTimeout:
        typer.echo("no worker answered within 60 s: is `photosearch worker` running?", err=True)
        raise typer.Exit(2) from None


def _go_on(redis: Any, candidate: str) -> None:
    """Send the step of the reindex that waited on the experiment, if one did."""
    from core.experiments import go_on
    from core.jobs import Jobs
    from core.taskqueue import create_celery

    settings = get_settings()
    publisher = create_celery(settings)
    try:
        go_on(publisher, Jobs(redis, settings.redis.prefix), candidate)
    finally:
        publisher.close()


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _waiting_for(redis: Any, experiment: Any) -> Any:
    """The reindex whose candidate is not ready to compare yet, if the experiment waits."""
    from core.experiments import candidate_ready, reindex_of
    from core.jobs import Jobs

    if not experiment.running:
        return None
    job = reindex_of(experiment.candidate, Jobs(redis, get_settings().redis.prefix).get)
    return None if candidate_ready(job) else job


def describe(experiment: Any, alpha: float, waiting: Any = None) -> list[str]:
    """The status lines of an experiment (`core.experiments.Experiment`); `waiting`: the
    reindex (`core.jobstatus.JobStatus`) its candidate waits for, if any."""
    from core.experiments import verdict

    e = experiment
    state = "running" if e.running else f"ended: {e.state} (by {e.ended_by})"
    lines = [
        f"experiment {e.id}: {state}",
        f"live         {e.live}",
        f"candidate    {e.candidate}",
        f"share        {e.share:.2%} of text searches (first pages)",
        f"started at   {_when(e.started_at)}",
    ]
    if waiting is not None and waiting.state in ("failed", "cancelled"):
        lines.append(
            f"not compared: reindex job {waiting.id} {waiting.state}; searches are the live "
            "collection's alone (end the experiment, resume the reindex)"
        )
    elif waiting is not None:
        lines.append(
            f"waiting      for reindex job {waiting.id} ({waiting.phase or waiting.state}) to "
            "hold every photo: searches are the live collection's alone until it catches up"
        )
    if not e.running:
        lines.append(f"ended at     {_when(e.ended_at)}" + (f": {e.reason}" if e.reason else ""))
    winner = verdict(e, alpha)
    significance = (
        f"significant at alpha {alpha}: the {winner} collection wins"
        if winner
        else f"not significant at alpha {alpha}"
    )
    lines += [
        f"impressions  {e.impressions} (searches with a click)",
        f"wins {e.wins}, losses {e.losses}, ties {e.ties} (for the candidate)",
        f"sign test    p = {e.p_value:.4g}: {significance}",
    ]
    return lines


@experiment_app.command("start")
def start_command(
    candidate: Annotated[
        str, typer.Option("--candidate", help="The collection to compare with the live one.")
    ],
    share: Annotated[
        float | None,
        typer.Option(
            "--share",
            min=0.0001,
            max=1.0,
            help="Share of text searches interleaved; unset: PHOTOSEARCH_API__EXPERIMENT_SHARE.",
        ),
    ] = None,
) -> None:
    """Interleave a share of text searches with the candidate's ranking until it ends."""
    from core.experiments import ExperimentError, reindex_of, start
    from core.jobs import Jobs
    from core.jobstatus import FINISHED

    settings = get_settings()
    redis = _redis()
    try:
        roles = {c["name"]: c for c in _collections()}
        live = next((name for name, c in roles.items() if c["role"] == "live"), None)
        # A running reindex's collection may be named before its worker has created it.
        job = _reconnecting()(lambda: reindex_of(candidate, Jobs(redis, settings.redis.prefix).get))
        if candidate not in roles and (job is None or job.state in FINISHED):
            typer.echo(
                f"no collection {candidate!r}, nor a reindex running that builds it "
                "(`photosearch index collections`)",
                err=True,
            )
            raise typer.Exit(1)
        if live is None:
            typer.echo("there is no live collection to compare with (run a sync)", err=True)
            raise typer.Exit(1)
        try:
            started = start(
                redis,
                settings.redis.prefix,
                live=live,
                candidate=candidate,
                share=share or settings.api.experiment_share,
            )
        except ExperimentError as exc:
            typer.echo(f"refused: {exc}", err=True)
            raise typer.Exit(1) from None
        waiting = _reconnecting()(lambda: _waiting_for(redis, started))
        typer.echo("\n".join(describe(started, settings.api.experiment_alpha, waiting)))
    finally:
        redis.close()


@experiment_app.command("status")
def status_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """The running experiment (or the last one): wins, losses, ties and the sign test."""
    from core.experiments import current, verdict

    settings = get_settings()
    alpha = settings.api.experiment_alpha
    redis = _redis()

    def read() -> tuple[Any, Any]:
        found = current(redis, settings.redis.prefix)
        return found, _waiting_for(redis, found) if found is not None else None

    try:
        found, waiting = _reconnecting()(read)
    finally:
        redis.close()
    if found is None:
        typer.echo("no experiment was started (`photosearch experiment start --candidate ...`)")
        return
    if as_json:
        winner = verdict(found, alpha)
        record = {**found.to_dict(), "alpha": alpha, "significant": winner is not None}
        held_by = waiting.id if waiting is not None else None
        typer.echo(json.dumps({**record, "winner": winner, "waiting_for": held_by}, indent=2))
        return
    typer.echo("\n".join(describe(found, alpha, waiting)))


@experiment_app.command("end")
def end_command(
    decision: Annotated[
        DecisionChoice,
        typer.Option(
            "--decision",
            help="switch: the reindex waiting on it switches (its quality gate still "
            "applies); drop: it is cancelled.",
        ),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Switch even though the live collection wins significantly."),
    ] = False,
) -> None:
    """End the running experiment with a decision."""
    from core.experiments import ExperimentError, current, end, switch_refusal

    settings = get_settings()
    redis = _redis()
    try:
        found = _reconnecting()(lambda: current(redis, settings.redis.prefix))
        if found is None:
            typer.echo("no experiment was started", err=True)
            raise typer.Exit(1)
        refusal = switch_refusal(found, settings.api.experiment_alpha)
        if decision is DecisionChoice.SWITCH and refusal and not force:
            typer.echo(f"refused: {refusal}", err=True)
            raise typer.Exit(1)
        try:
            ended = end(
                redis,
                settings.redis.prefix,
                found.id,
                "switch" if decision is DecisionChoice.SWITCH else "drop",
                by="admin",
                reason="forced" if force else "",
            )
        except ExperimentError as exc:
            typer.echo(f"refused: {exc}", err=True)
            raise typer.Exit(1) from None
        _go_on(redis, ended.candidate)
        typer.echo("\n".join(describe(ended, settings.api.experiment_alpha)))
    finally:
        redis.close()
