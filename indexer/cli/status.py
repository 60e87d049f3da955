"""`photosearch index status` and `collections`, and a job followed to its end with a
progress bar (what `--wait` does)."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from core.jobstatus import FINISHED, JobKind, JobState
from core.settings import get_settings
from core.unreachable import Reconnecting
from indexer.cli.common import call_worker, index_app, jobs_of_settings, publisher, reconnecting


def eta(job: Any) -> str:
    """A finished job has none (it said "ETA 0s", as if about to end); "?" while unknown."""

    if job.state in FINISHED:
        return "-"
    return "?" if job.eta_s is None else age(job.eta_s)


def progress(job: Any) -> str:
    """What a job's row has no column for: its phase, shards, regrouping, change capture."""
    phase = f"{job.phase} round {job.round}  " if job.phase else ""
    planning = f"  planned {job.shards_planned}/{job.shards_total} shards" if job.planning else ""
    regrouped = f"  regrouped {job.regrouped}" if job.regrouped else ""
    # A reindex's (or rollback's) change capture: what the live side changed that waits.
    lag = ""
    if job.kind in (JobKind.REINDEX, JobKind.ROLLBACK) and (
        job.lag or job.lag_shards or job.replayed
    ):
        oldest = f", oldest {time.time() - job.lag_oldest_at:.0f}s old" if job.lag else ""
        shards = f" + {job.lag_shards} whole shards" if job.lag_shards else ""
        lag = f"  lag {job.lag} changes{shards}{oldest}  replayed {job.replayed}"
    # Differences the source explained, replayed before the verification passed.
    repaired = f"  repaired {job.repaired} in {job.repair_rounds} rounds" if job.repaired else ""
    locked = f"  live lock held {job.lock_s:.1f}s" if job.lock_s else ""
    return (
        f"{phase}listed {job.listed}  updated {job.updated}"
        f"{planning}{regrouped}{lag}{repaired}{locked}"
    )


def describe(job: Any) -> str:
    """One job on a line of its own (what a followed job ends with)."""
    from indexer.jobs.gate_status import gate_lines

    left = "" if job.state in FINISHED else f"  ETA {eta(job)}"
    return (
        f"{job.id}  {job.kind:<9} {job.state:<10} done {job.done}  failed {job.failed}  "
        f"skipped {job.skipped}  total {job.total}  deleted {job.deleted}  "
        f"{job.images_per_s:.1f} img/s{left}  {job.collection}\n    {progress(job)}"
        + (f"\n    {job.message}" if job.message else "")
        + "".join(f"\n{line}" for line in gate_lines(job.quality))
    )


COLUMNS = ("JOB", "KIND", "STATE", "DONE", "TOTAL", "FAILED", "SKIPPED", "DELETED", "RATE")


def status_table(found: list[Any]) -> list[str]:
    """`index status`'s jobs: a header row, a row a job, its progress and message beneath."""
    header = [*COLUMNS, "ETA", "COLLECTION"]
    rows = [
        [
            *(job.id, job.kind, job.state, str(job.done), str(job.total), str(job.failed)),
            *(str(job.skipped), str(job.deleted), f"{job.images_per_s:.1f} img/s"),
            *(eta(job), job.collection or "-"),
        ]
        for job in found
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
        ).rstrip()

    from indexer.jobs.gate_status import gate_lines

    lines = [line(header)]
    for job, row in zip(found, rows, strict=True):
        lines += [line(row), f"    {progress(job)}"]
        if job.message:
            lines.append(f"    {job.message}")
        lines += gate_lines(job.quality)  # a reindex's quality gate: live and new side by side
    return lines


def read_job(jobs: Any, job_id: str, retry: Reconnecting) -> Any:
    """The job's record, read through a restart of Redis; exit 2 where it is gone."""
    job = retry(lambda: jobs.get(job_id))
    if job is None:
        typer.echo(f"job {job_id} is gone from Redis: its record expired or was lost", err=True)
        raise typer.Exit(2)
    return job


def follow(
    jobs: Any, job_id: str, label: str | None = None, *, retry: Reconnecting | None = None
) -> Any:
    """Show a progress bar until the job finishes, then its counts and problems; the job.

    A lost Redis is retried (`retry`, by default the settings' `reconnecting`): the job goes
    on without this command, and its outcome is what the command reports.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    retry = retry or reconnecting()
    job = read_job(jobs, job_id, retry)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]:.1f} img/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(label or f"job {job_id}", total=max(job.total, 1), rate=0.0)
        while True:
            job = read_job(jobs, job_id, retry)
            # The total grows while shards are planned: the bar follows the estimate.
            if job.estimated_total:
                progress.update(task, total=job.estimated_total)
            progress.update(task, completed=job.processed, rate=job.images_per_s)
            if job.state in FINISHED:
                break
            time.sleep(0.5)
    typer.echo(describe(job))
    for line in retry(lambda: jobs.problems(job_id))[:20]:
        typer.echo(f"    skipped/failed: {line}")
    return job


def follow_job(job_id: str) -> None:
    """Follow a job; exit 1 when it failed (a refusal's message on stderr)."""

    job = follow(jobs_of_settings(), job_id)
    if job.refused:
        typer.echo(job.message, err=True)
    if job.state == JobState.FAILED:
        raise typer.Exit(1)


@index_app.command("status")
def status_command(
    job_id: Annotated[
        str | None, typer.Argument(help="One job.", show_default="recent ones")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
    limit: Annotated[int, typer.Option(min=1)] = 10,
) -> None:
    """Jobs with counts, rate and ETA; collections, their roles and aliases when a worker
    answers."""
    jobs = jobs_of_settings()

    def read() -> tuple[list[Any], dict[str, list[str]], Any, str]:
        found = [jobs.get(job_id)] if job_id else jobs.recent(limit)
        shown = [job for job in found if job is not None] if as_json or job_id else []
        problems = {job.id: jobs.problems(job.id)[:100] for job in shown}
        return found, problems, *collections_of_workers(jobs.redis, jobs.prefix)

    # Read whole, again if Redis restarts meanwhile: nothing is printed from half a read.
    found, problems, stores, why = reconnecting()(read)
    if job_id and found[0] is None:
        raise typer.BadParameter(f"no job {job_id}")
    if as_json:
        out = {
            "jobs": [{**job.to_dict(), "problems": problems[job.id]} for job in found],
            "collections": stores,
        }
        typer.echo(json.dumps(out, indent=2))
        return
    if found:
        typer.echo("\n".join(status_table(found)))
        if job_id:  # one job: its first problems too (photos skipped, automatic tags off)
            typer.echo(
                "".join(f"    problem: {line}\n" for line in problems[job_id][:20]), nl=False
            )
    else:
        typer.echo("no jobs")
    if stores is None:
        typer.echo(f"collections: {why}")
    for info in stores or []:
        typer.echo(collection_line(info))


def collections_of_workers(redis: Any, prefix: str, timeout_s: float = 5) -> tuple[Any, str]:
    """The collections as a worker describes them, or None and why not.

    Asked only of a running worker, and withdrawn unanswered: a status query leaves no task
    in a queue that no one reads (a worker arriving later would answer no one).
    """
    from celery.exceptions import TimeoutError as CeleryTimeout

    from core.deployment import running_workers
    from core.taskqueue import COLLECTIONS, control_queue

    if not running_workers(redis, prefix):
        return None, "no worker is running (is `photosearch worker` or `up` started?)"
    sent = publisher().send_task(COLLECTIONS, expires=timeout_s)
    try:
        return sent.get(timeout=timeout_s, disable_sync_subtasks=False), ""  # as in call_worker
    except CeleryTimeout:
        sent.backend.remove_pending_result(sent)  # now, while its Redis is there to be told
        queue = control_queue(get_settings())
        for raw in redis.lrange(queue, 0, -1):
            if json.loads(raw).get("headers", {}).get("id") == sent.id:
                redis.lrem(queue, 1, raw)
        return None, f"no worker answered within {timeout_s:.0f} s"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def collection_line(info: dict[str, Any]) -> str:
    """One collection as the worker's `indexer.collections` describes it."""
    aliases = ", ".join(info["aliases"]) or "-"
    return (
        f"{info['name']}  {info.get('role', '?'):<8}  model v{info['model_version']}  "
        f"{info['points']} photos  age {age(info.get('age_s'))}  aliases: {aliases}"
    )


@index_app.command("collections")
def collections_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """Every collection with its role (live, previous, reindex, failed, orphan), size and age."""
    from core.collectionroles import Role, drop_command, resume_command
    from core.taskqueue import COLLECTIONS

    found: list[dict[str, Any]] = call_worker(COLLECTIONS)
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    if not found:
        typer.echo("no collections")
    for info in found:
        typer.echo(collection_line(info))
        if info.get("role") == Role.FAILED:
            typer.echo(f"    resume: {resume_command(info['job_id'])}")
        if info.get("role") in (Role.FAILED, Role.ORPHAN):
            typer.echo(f"    drop:   {drop_command(info['name'])}")
