"""`photosearch index ...`, `photosearch worker` and `photosearch beat`."""

from __future__ import annotations

import json
import os
import time
from enum import StrEnum
from typing import Annotated, Any

import typer

from core.settings import get_settings

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


def _require_photosearch() -> None:
    """Exit 2 unless the settings' Redis is PhotoSearch's: a command never writes to another
    (the machine's own Redis on 6379, say), and says how to find PhotoSearch's instead."""
    from redis import Redis

    from core.deployment import NotPhotoSearch, require

    settings = get_settings()
    redis = Redis.from_url(settings.redis.url, socket_timeout=10, socket_connect_timeout=10)
    try:
        require(redis, settings.redis.prefix)
    except NotPhotoSearch as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    finally:
        redis.close()


def _jobs() -> Any:
    from core.jobs import Jobs

    _require_photosearch()
    return Jobs.from_settings(get_settings())


def _publisher() -> Any:
    """A Celery app that sends this command's task by name (the process ends after)."""
    from core.taskqueue import create_celery

    _require_photosearch()
    return create_celery(get_settings())


def _eta(job: Any) -> str:
    """A finished job has none (it said "ETA 0s", as if about to end); "?" while unknown."""
    from core.jobstatus import FINISHED

    if job.state in FINISHED:
        return "-"
    return "?" if job.eta_s is None else _age(job.eta_s)


def _progress(job: Any) -> str:
    """What a job's row has no column for: its phase, shards, regrouping, change capture."""
    phase = f"{job.phase} round {job.round}  " if job.phase else ""
    planning = f"  planned {job.shards_planned}/{job.shards_total} shards" if job.planning else ""
    regrouped = f"  regrouped {job.regrouped}" if job.regrouped else ""
    # A reindex's (or rollback's) change capture: what the live side changed that waits.
    lag = ""
    if job.kind in ("reindex", "rollback") and (job.lag or job.lag_shards or job.replayed):
        oldest = f", oldest {time.time() - job.lag_oldest_at:.0f}s old" if job.lag else ""
        shards = f" + {job.lag_shards} whole shards" if job.lag_shards else ""
        lag = f"  lag {job.lag} changes{shards}{oldest}  replayed {job.replayed}"
    locked = f"  live lock held {job.lock_s:.1f}s" if job.lock_s else ""
    return f"{phase}listed {job.listed}  updated {job.updated}{planning}{regrouped}{lag}{locked}"


def _describe(job: Any) -> str:
    """One job on a line of its own (what a followed job ends with)."""
    from core.jobstatus import FINISHED
    from indexer.jobs.gate_status import gate_lines

    eta = "" if job.state in FINISHED else f"  ETA {_eta(job)}"
    return (
        f"{job.id}  {job.kind:<9} {job.state:<10} done {job.done}  failed {job.failed}  "
        f"skipped {job.skipped}  total {job.total}  deleted {job.deleted}  "
        f"{job.images_per_s:.1f} img/s{eta}  {job.collection}\n    {_progress(job)}"
        + (f"\n    {job.message}" if job.message else "")
        + "".join(f"\n{line}" for line in gate_lines(job.quality))
    )


_COLUMNS = ("JOB", "KIND", "STATE", "DONE", "TOTAL", "FAILED", "SKIPPED", "DELETED", "RATE")


def _status_table(found: list[Any]) -> list[str]:
    """`index status`'s jobs: a header row, a row a job, its progress and message beneath."""
    header = [*_COLUMNS, "ETA", "COLLECTION"]
    rows = [
        [
            *(job.id, job.kind, job.state, str(job.done), str(job.total), str(job.failed)),
            *(str(job.skipped), str(job.deleted), f"{job.images_per_s:.1f} img/s"),
            *(_eta(job), job.collection or "-"),
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
        lines += [line(row), f"    {_progress(job)}"]
        if job.message:
            lines.append(f"    {job.message}")
        lines += gate_lines(job.quality)  # a reindex's quality gate: live and new side by side
    return lines


def follow(jobs: Any, job_id: str, label: str | None = None) -> Any:
    """Show a progress bar until the job finishes, then its counts and problems; the job."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from core.jobstatus import FINISHED

    job = jobs.get(job_id)
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
            job = jobs.get(job_id)
            # The total grows while shards are planned: the bar follows the estimate.
            if job.estimated_total:
                progress.update(task, total=job.estimated_total)
            progress.update(task, completed=job.processed, rate=job.images_per_s)
            if job.state in FINISHED:
                break
            time.sleep(0.5)
    typer.echo(_describe(job))
    for line in jobs.problems(job_id)[:20]:
        typer.echo(f"    skipped/failed: {line}")
    return job


def _follow(job_id: str) -> None:
    """Follow a job; exit 1 when it failed (a refusal's message on stderr)."""
    from core.jobstatus import JobState

    job = follow(_jobs(), job_id)
    if job.refused:
        typer.echo(job.message, err=True)
    if job.state == JobState.FAILED:
        raise typer.Exit(1)


def _started(submitted: Any, what: str, wait: bool) -> None:
    """Say which job answers (a new one, or the running one joined); refused: exit 1."""
    if submitted.refused:
        typer.echo(f"refused: {submitted.refused}", err=True)
        raise typer.Exit(1)
    if submitted.joined:
        typer.echo(f"joined the running job {submitted.job_id} ({what}): it already does this")
    else:
        typer.echo(f"{what} job {submitted.job_id} queued")
    if wait:
        _follow(submitted.job_id)


def _source(source: str | None, jobs: Any) -> str:
    """The source asked for, else the last synced or configured one, checked and normalized."""
    from core.sources import SourceError, check_source

    uri = source or jobs.recall("source") or get_settings().indexer.source
    if uri is None:
        raise typer.BadParameter("no source: pass --source or set PHOTOSEARCH_INDEXER__SOURCE")
    try:
        return check_source(str(uri), get_settings())
    except SourceError as exc:
        raise typer.BadParameter(str(exc)) from None


@index_app.command("sync")
def sync_command(
    source: Annotated[
        str | None, typer.Option(help="file:///dir, a folder, or s3://bucket/prefix.")
    ] = None,
    wait: WaitOption = False,
    force: ForceOption = False,
) -> None:
    """List the source: index what is new or changed, delete what is gone (the full sync)."""
    from core.submit import submit_sync

    jobs = _jobs()
    uri = _source(source, jobs)
    _started(submit_sync(_publisher(), jobs, uri, force=force), f"sync of {uri}", wait)


@index_app.command("increment")
def increment_command(wait: WaitOption = False, force: ForceOption = False) -> None:
    """Index what the change feed (PHOTOSEARCH_INDEXER__FEED) reported, listing nothing."""
    from core.jobstatus import JobKind
    from core.submit import submit_sync

    jobs = _jobs()
    uri = _source(None, jobs)
    submitted = submit_sync(_publisher(), jobs, uri, JobKind.INCREMENT, force=force)
    _started(submitted, f"increment of {uri}", wait)


@index_app.command("cancel")
def cancel_command(job_id: str) -> None:
    """End a job that is stuck, its locks released: a reindex keeps its work, to be resumed
    (`index reindex --resume JOB`); another job is marked failed and its work dropped."""
    from core.collectionroles import drop_command, resume_command
    from core.jobstatus import FINISHED, JobKind, JobState
    from indexer.queue.workqueue import WorkQueue

    jobs = _jobs()
    job = jobs.get(job_id)
    if job is None:
        raise typer.BadParameter(f"no job {job_id}")
    if job.state in FINISHED:
        typer.echo(f"job {job_id} has already ended: {job.state}")
        return
    if job.kind == JobKind.REINDEX:
        jobs.finish(job_id, JobState.CANCELLED, "cancelled by an operator")
        typer.echo(f"reindex job {job_id} cancelled; its work is kept")
        typer.echo(f"    resume: {resume_command(job_id)}")
        if job.collection:
            typer.echo(f"    drop:   {drop_command(job.collection)}")
        return
    jobs.finish(job_id, JobState.FAILED, "cancelled by an operator")
    WorkQueue(jobs.redis, jobs.prefix).drop(job_id, jobs.ttl_s)
    typer.echo(f"job {job_id} cancelled")


@index_app.command("reindex")
def reindex_command(
    model_version: Annotated[
        int | None, typer.Option(min=1, help="The Triton model version to use.")
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="The source to read.", show_default="the last synced source")
    ] = None,
    wait: WaitOption = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Switch even to a collection of fewer than (1 - "
            "PHOTOSEARCH_INDEXER__MAX_DELETE_SHARE) x the live one's photos, and even when "
            "the quality gate finds its nDCG@10 more than "
            "PHOTOSEARCH_INDEXER__MAX_QUALITY_DROP below the live one's (the job records "
            "that it overrode the gate, with the figures).",
        ),
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="JOB",
            help="Go on with a failed, cancelled or paused reindex from its kept work, "
            "instead of starting one (its own version, source and force).",
        ),
    ] = None,
) -> None:
    """Rebuild every photo with a new model version beside the live index, then switch; or
    go on with one (--resume)."""
    from core.submit import submit_reindex

    if resume is not None:
        if model_version is not None or source is not None or force:
            raise typer.BadParameter(
                "--resume goes on with the job's own model version, source and force: "
                "give none of them"
            )
        _resume(resume, wait)
        return
    if model_version is None:
        raise typer.BadParameter("give --model-version N (a new reindex) or --resume JOB")
    jobs = _jobs()
    uri = _source(source, jobs)
    submitted = submit_reindex(_publisher(), jobs, model_version, uri, force=force)
    _started(submitted, f"reindex with model version {model_version} of {uri}", wait)


def _resume(job_id: str, wait: bool) -> None:
    from core.submit import UnknownJob, submit_resume

    try:
        submitted = submit_resume(_publisher(), _jobs(), job_id)
    except UnknownJob as exc:
        raise typer.BadParameter(str(exc)) from None
    if submitted.refused:
        typer.echo(f"refused: {submitted.refused}", err=True)
        raise typer.Exit(1)
    typer.echo(f"reindex job {job_id} resumed: queued for a worker")
    if wait:
        _follow(job_id)


def _call(name: str, *args: Any) -> Any:
    """Run a task on the worker that owns the store and return its answer."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    publisher = _publisher()  # outside the try: its refusal is not the worker's
    try:
        # A command is never a task: Celery's guard against waiting inside one does not apply
        # (and trips where a task ran in this process before, as in the test suite).
        return publisher.send_task(name, args=args).get(timeout=60, disable_sync_subtasks=False)
    except CeleryTimeout:
        typer.echo("no worker answered within 60 s: is `photosearch worker` running?", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # the worker's refusal, e.g. nothing to roll back to
        typer.echo(f"refused: {exc}", err=True)
        raise typer.Exit(1) from None


@index_app.command("rollback")
def rollback_command() -> None:
    """Searches go back to the previous collection (and model version) at once."""
    from core.jobstatus import FINISHED, JobState
    from core.submit import submit_rollback

    # A job record, not a task result: the API asks the same way, and a worker embedded in
    # another process (the API's) answers it like any other.
    jobs = _jobs()
    job_id = submit_rollback(_publisher(), jobs)
    job = jobs.wait(job_id, timeout_s=60)
    if job is None or job.state == JobState.QUEUED:
        typer.echo("no worker answered within 60 s: is `photosearch worker` running?", err=True)
        raise typer.Exit(2)
    if job.state not in FINISHED:  # replaying the changes since the switch, or waiting a job
        job = follow(jobs, job_id, "rollback: replaying the changes since the switch")
    if job.state == JobState.FAILED:
        typer.echo(f"refused: {job.message}", err=True)
        raise typer.Exit(1)
    typer.echo(job.message)


@index_app.command("drop")
def drop_command(collection: str) -> None:
    """Delete a collection that is not live (after a rollback is no longer wanted)."""
    from core.taskqueue import DROP

    typer.echo(_call(DROP, collection))


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
    jobs = _jobs()
    found = [jobs.get(job_id)] if job_id else jobs.recent(limit)
    if job_id and found[0] is None:
        raise typer.BadParameter(f"no job {job_id}")
    stores, why = _collections(jobs.redis, jobs.prefix)
    if as_json:
        out = {
            "jobs": [{**job.to_dict(), "problems": jobs.problems(job.id)[:100]} for job in found],
            "collections": stores,
        }
        typer.echo(json.dumps(out, indent=2))
        return
    if found:
        typer.echo("\n".join(_status_table(found)))
        if job_id:  # one job: its first problems too (photos skipped, automatic tags off)
            typer.echo(
                "".join(f"    problem: {line}\n" for line in jobs.problems(job_id)[:20]), nl=False
            )
    else:
        typer.echo("no jobs")
    if stores is None:
        typer.echo(f"collections: {why}")
    for info in stores or []:
        typer.echo(_collection_line(info))


def _collections(redis: Any, prefix: str, timeout_s: float = 5) -> tuple[Any, str]:
    """The collections as a worker describes them, or None and why not.

    Asked only of a running worker, and withdrawn unanswered: a status query leaves no task
    in a queue that no one reads (a worker arriving later would answer no one).
    """
    from celery.exceptions import TimeoutError as CeleryTimeout

    from core.deployment import running_workers
    from core.taskqueue import COLLECTIONS, control_queue

    if not running_workers(redis, prefix):
        return None, "no worker is running (is `photosearch worker` or `up` started?)"
    sent = _publisher().send_task(COLLECTIONS, expires=timeout_s)
    try:
        return sent.get(timeout=timeout_s, disable_sync_subtasks=False), ""  # as in _call
    except CeleryTimeout:
        sent.backend.remove_pending_result(sent)  # now, while its Redis is there to be told
        queue = control_queue(get_settings())
        for raw in redis.lrange(queue, 0, -1):
            if json.loads(raw).get("headers", {}).get("id") == sent.id:
                redis.lrem(queue, 1, raw)
        return None, f"no worker answered within {timeout_s:.0f} s"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _collection_line(info: dict[str, Any]) -> str:
    """One collection as the worker's `indexer.collections` describes it."""
    aliases = ", ".join(info["aliases"]) or "-"
    return (
        f"{info['name']}  {info.get('role', '?'):<8}  model v{info['model_version']}  "
        f"{info['points']} photos  age {_age(info.get('age_s'))}  aliases: {aliases}"
    )


@index_app.command("collections")
def collections_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """Every collection with its role (live, previous, reindex, failed, orphan), size and age."""
    from core.collectionroles import Role, drop_command, resume_command
    from core.taskqueue import COLLECTIONS

    found: list[dict[str, Any]] = _call(COLLECTIONS)
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    if not found:
        typer.echo("no collections")
    for info in found:
        typer.echo(_collection_line(info))
        if info.get("role") == Role.FAILED:
            typer.echo(f"    resume: {resume_command(info['job_id'])}")
        if info.get("role") in (Role.FAILED, Role.ORPHAN):
            typer.echo(f"    drop:   {drop_command(info['name'])}")


def worker_command(
    queues: Annotated[
        str | None, typer.Option(help="Comma-separated queues.", show_default="all")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Task threads.", show_default="PHOTOSEARCH_INDEXER__CONCURRENCY"),
    ] = None,
    loglevel: LogLevelOption = LogLevel.INFO,
    name: Annotated[str, typer.Option(help="Its name in logs and job records.")] = "photosearch",
) -> None:
    """Run a Celery worker (threads: one process owns the embedded store)."""
    import threading

    from core.taskqueue import all_queues
    from indexer.app import create_app
    from indexer.rounds import nudging

    settings = get_settings()
    app = create_app(settings)
    names = queues or ",".join(all_queues(settings))
    if settings.indexer.metrics_port:
        from indexer.metrics import serve_metrics

        serve_metrics(settings)
    nudging(app, threading.Event())  # a daemon thread: it ends with the process
    app.worker_main(
        [
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency or settings.indexer.concurrency}",
            f"--queues={names}",
            f"--loglevel={loglevel.value}",
            f"--hostname={name}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def beat_command(loglevel: LogLevelOption = LogLevel.INFO) -> None:
    """Run Celery beat: the nightly sync at PHOTOSEARCH_INDEXER__SYNC_CRON."""
    from indexer.app import create_app

    settings = get_settings()
    app = create_app(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = settings.data_dir / "celerybeat-schedule"
    app.start(["beat", f"--loglevel={loglevel.value}", f"--schedule={schedule}"])
