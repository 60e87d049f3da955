"""Starting index jobs from any process (the API, the CLI, beat, `up`): a job record, the lock
of what it changes, and its first task sent by name."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from core.jobs import LIVE_LOCK, REINDEX_LOCK, JobKind, Jobs
from core.taskqueue import INCREMENT, REINDEX, ROLLBACK, SYNC, send


class JobRefused(Exception):
    """Another job holds what this one would change."""


@dataclass(frozen=True)
class Submitted:
    """The job that answers a request: a new one, a running one it joined, or none (refused)."""

    job_id: str
    joined: bool = False
    refused: str = ""  # why nothing started


def submit_sync(
    app: Celery, jobs: Jobs, source: str, kind: JobKind = JobKind.SYNC, *, force: bool = False
) -> Submitted:
    """Start a sync or an increment of the live collection, unless a job already changes it:
    the same kind over the same source (and force) is joined, anything else refuses this one.
    force: it may delete more than max_delete_share of the live index."""
    job_id = jobs.create(kind, source=source, force=int(force))
    holder = jobs.claim_lock(LIVE_LOCK, job_id)
    if holder is None:
        send(app, SYNC if kind == JobKind.SYNC else INCREMENT, job_id, source)
        return Submitted(job_id)
    jobs.delete(job_id)
    running = jobs.get(holder)
    asked = (kind, source, force)
    if running is not None and (running.kind, running.source, running.force) == asked:
        return Submitted(holder, joined=True)
    what = f"{running.kind} job {holder}" if running else f"job {holder}"
    return Submitted(
        holder, refused=f"{what} is changing the live collection; try again once it has finished"
    )


def queue_sync(app: Celery, jobs: Jobs, source: str, *, force: bool = False) -> str:
    """A full sync (or the running one it joins): `up`, the load tests and tests start this way."""
    submitted = submit_sync(app, jobs, source, force=force)
    if submitted.refused:
        raise JobRefused(submitted.refused)
    return submitted.job_id


def submit_reindex(
    app: Celery, jobs: Jobs, model_version: int, source: str, *, force: bool = False
) -> Submitted:
    """Start a reindex, unless one runs: the same version over the same source is joined.
    force: it may switch to a collection of fewer than (1 - max_delete_share) x the live one's
    photos."""
    job_id = jobs.create(
        JobKind.REINDEX, source=source, model_version=model_version, force=int(force)
    )
    holder = jobs.claim_lock(REINDEX_LOCK, job_id)
    if holder is None:
        send(app, REINDEX, job_id, model_version, source)
        return Submitted(job_id)
    jobs.delete(job_id)
    running = jobs.get(holder)
    asked = (model_version, source, force)
    if running is not None and (running.model_version, running.source, running.force) == asked:
        return Submitted(holder, joined=True)
    version = running.model_version if running else "?"
    return Submitted(
        holder, refused=f"reindex job {holder} (model version {version}) is running; wait for it"
    )


def submit_rollback(app: Celery, jobs: Jobs) -> str:
    """Ask a worker to point searches back at the previous collection; the job's id."""
    job_id = jobs.create(JobKind.ROLLBACK)
    send(app, ROLLBACK, job_id)
    return job_id
