"""The commands that start or end a job: `photosearch index sync`, `increment`, `reindex`
(and `--resume`), `rollback`, `cancel` and `drop`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from core.jobstatus import FINISHED, JobKind, JobState
from indexer.cli.common import (
    ForceOption,
    WaitOption,
    call_worker,
    index_app,
    jobs_of_settings,
    publisher,
    reconnecting,
    source_of,
)
from indexer.cli.status import follow, follow_job


def started(submitted: Any, what: str, wait: bool) -> None:
    """Say which job answers (a new one, the running one joined, or one in line behind the
    job changing the live collection); refused: exit 1. wait: follow it to its end."""
    if submitted.refused:
        typer.echo(f"refused: {submitted.refused}", err=True)
        raise typer.Exit(1)
    if submitted.joined:
        typer.echo(f"joined the running job {submitted.job_id} ({what}): it already does this")
    elif submitted.queued:
        typer.echo(
            f"{what} job {submitted.job_id} queued: it waits in line and starts once the "
            "job changing the live collection has finished"
        )
    else:
        typer.echo(f"{what} job {submitted.job_id} queued")
    if wait:
        follow_job(submitted.job_id)


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

    jobs = jobs_of_settings()
    uri = source_of(source, jobs)
    started(submit_sync(publisher(), jobs, uri, force=force), f"sync of {uri}", wait)


@index_app.command("increment")
def increment_command(wait: WaitOption = False, force: ForceOption = False) -> None:
    """Index what the change feed (PHOTOSEARCH_INDEXER__FEED) reported, listing nothing."""
    from core.submit import submit_sync

    jobs = jobs_of_settings()
    uri = source_of(None, jobs)
    submitted = submit_sync(publisher(), jobs, uri, JobKind.INCREMENT, force=force)
    started(submitted, f"increment of {uri}", wait)


@index_app.command("cancel")
def cancel_command(job_id: str) -> None:
    """End a job that is stuck, its locks released: a reindex keeps its work, to be resumed
    (`index reindex --resume JOB`); another job is marked failed and its work dropped."""
    from core.collectionroles import drop_command, resume_command
    from indexer.queue.workqueue import WorkQueue

    jobs = jobs_of_settings()
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
        resume_job(resume, wait)
        return
    if model_version is None:
        raise typer.BadParameter("give --model-version N (a new reindex) or --resume JOB")
    jobs = jobs_of_settings()
    uri = source_of(source, jobs)
    submitted = submit_reindex(publisher(), jobs, model_version, uri, force=force)
    started(submitted, f"reindex with model version {model_version} of {uri}", wait)


def resume_job(job_id: str, wait: bool) -> None:
    from core.submit import UnknownJob, submit_resume

    try:
        submitted = submit_resume(publisher(), jobs_of_settings(), job_id)
    except UnknownJob as exc:
        raise typer.BadParameter(str(exc)) from None
    if submitted.refused:
        typer.echo(f"refused: {submitted.refused}", err=True)
        raise typer.Exit(1)
    typer.echo(f"reindex job {job_id} resumed: queued for a worker")
    if wait:
        follow_job(job_id)


@index_app.command("rollback")
def rollback_command() -> None:
    """Searches go back to the previous collection (and model version) at once."""
    from core.submit import submit_rollback

    # A job record, not a task result: the API asks the same way, and a worker embedded in
    # another process (the API's) answers it like any other.
    jobs = jobs_of_settings()
    job_id = submit_rollback(publisher(), jobs)
    job = reconnecting()(lambda: jobs.wait(job_id, timeout_s=60))
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

    typer.echo(call_worker(DROP, collection))
