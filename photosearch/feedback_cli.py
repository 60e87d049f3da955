"""`photosearch judgements from-clicks` and `photosearch analytics`: the search log and the
events on its results (kept by the API in PHOTOSEARCH_REDIS__URL's Redis), read here.

Like `photosearch index`, both reach the `photosearch up` running on this data directory by
themselves, unless the environment names a Redis.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from core.feedback.analytics import Analytics, analyse
from core.feedback.clickmodel import judgements
from core.feedback.events import StoredEvent, read_events
from core.feedback.popularity import WEIGHTS, refresh
from core.feedback.searchlog import SearchRecord, read_searches
from core.quality.judgements import write_judgements
from core.settings import Settings, get_settings

DAY_S = 86400
# The text report's rates by rank: the first pages; --json gives every rank.
RANKS_SHOWN = 20

judgements_app = typer.Typer(
    no_args_is_help=True, help="Judgement sets made of what searchers did with the results."
)
feedback_app = typer.Typer(
    no_args_is_help=True, help="What the events on search results make of the catalogue."
)


def _adopt_running_up() -> None:
    """Reach the `up` running on this data directory as `photosearch index` does."""
    from photosearch.up.running import adopt_running_up

    line = adopt_running_up(os.environ)
    if line is not None:
        typer.echo(line, err=True)
        get_settings.cache_clear()


def read_log(
    settings: Settings, days: int, now: float
) -> tuple[list[SearchRecord], list[StoredEvent]]:
    """The searches of the last `days` days (within the retention) and the events on them."""
    from redis import Redis

    retention_s = settings.api.feedback_retention_days * DAY_S
    since = now - days * DAY_S
    prefix = settings.redis.prefix
    redis = Redis.from_url(settings.redis.url, socket_timeout=30, socket_connect_timeout=5)
    try:
        records = list(read_searches(redis, prefix, since=since, now=now, ttl_s=retention_s))
        events = list(read_events(redis, prefix, since=since, now=now, retention_s=retention_s))
    finally:
        redis.close()
    return records, events


@judgements_app.command("from-clicks")
def from_clicks_command(
    out: Annotated[
        Path, typer.Option("--out", help="The folder to write queries.tsv and qrels.txt in.")
    ],
    since: Annotated[
        int, typer.Option("--since", min=1, help="Read the searches of the last DAYS days.")
    ] = 30,
    min_sessions: Annotated[
        int,
        typer.Option(
            "--min-sessions", min=1, help="Write a query searched in this many sessions at least."
        ),
    ] = 3,
) -> None:
    """Grade the results of the searched queries by their clicks (the click model of
    core/feedback/clickmodel.py) into a judgement set for `photosearch eval` and the gate."""
    _adopt_running_up()
    records, events = read_log(get_settings(), since, time.time())
    made = judgements(records, events, min_sessions=min_sessions, name=out.name)
    if not made.queries:
        typer.echo(
            f"no query of the {len(records)} searches of the last {since} days was searched in "
            f"{min_sessions} sessions and clicked: nothing written",
            err=True,
        )
        raise typer.Exit(1)
    write_judgements(out, made)
    grades = [g for judged in made.qrels.values() for g in judged.values()]
    typer.echo(
        f"{out}: {len(made.queries)} queries, {len(grades)} judgements "
        f"({grades.count(2)} graded 2, {grades.count(1)} graded 1) from {len(records)} searches "
        f"and {len(events)} events of the last {since} days"
    )


def analytics_command(
    days: Annotated[int, typer.Option("--days", min=1, help="The last DAYS days.")] = 7,
    top: Annotated[int, typer.Option("--top", min=0, help="Queries listed of each kind.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Searches, zero-result and no-click queries (the queries the catalogue fails), and the
    click-through rate by rank, from the search log."""

    _adopt_running_up()
    records, events = read_log(get_settings(), days, time.time())
    figures = analyse(records, events, top=top)
    if as_json:
        typer.echo(json.dumps({"days": days, **figures.to_dict()}, indent=2))
    else:
        typer.echo(report(figures, days))


def report(figures: Analytics, days: int) -> str:
    """The figures as text."""
    actions = ", ".join(f"{n} {action}" for action, n in figures.events.items()) or "none"
    lines = [
        f"the last {days} days: {figures.searches} searches ({figures.text_searches} by text) "
        f"in {figures.sessions} sessions; {figures.searches_with_a_click} with a click",
        f"events: {actions}",
        f"zero-result queries ({figures.zero_result_searches} searches):",
        *(f"  {n:6d}  {query}" for query, n in figures.zero_result),
        f"no-click queries ({figures.no_click_searches} searches):",
        *(f"  {n:6d}  {query}" for query, n in figures.no_click),
        "click-through by rank:",
        "    rank   shown  clicked    rate",
        *(
            f"  {r.rank:6d}  {r.shown:6d}  {r.clicked:7d}  {r.ctr:6.3f}"
            for r in figures.by_rank[:RANKS_SHOWN]
        ),
    ]
    return "\n".join(lines)


@feedback_app.command("popularity")
def popularity_command(
    since: Annotated[
        int | None,
        typer.Option(
            "--since", min=1, help="Count the events of the last DAYS days (default: all kept)."
        ),
    ] = None,
) -> None:
    """Each photo's popularity (opens + 5 x downloads) from the events on search results,
    for the popularity boost: the photos whose value changed are written by the next sync or
    increment, as any other change of their metadata (docs/searching/boosts.md)."""
    from redis import Redis

    _adopt_running_up()
    settings = get_settings()
    days = since or settings.api.feedback_retention_days
    now = time.time()
    redis = Redis.from_url(settings.redis.url, socket_timeout=30, socket_connect_timeout=5)
    try:
        done = refresh(
            redis,
            settings.redis.prefix,
            since=now - days * DAY_S,
            now=now,
            retention_s=settings.api.feedback_retention_days * DAY_S,
        )
    finally:
        redis.close()
    weights = ", ".join(f"{action} {w:g}" for action, w in WEIGHTS.items())
    typer.echo(
        f"{done.photos} photos with events in the last {days} days ({done.events} events; "
        f"{weights}); {len(done.changed)} changed, written by the next sync or increment"
    )
