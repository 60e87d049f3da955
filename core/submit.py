"""Starting index jobs from any process (the API, the CLI, beat, `up`): a job record, the lock
of what it changes, and its first task sent by name."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from core.collectionroles import drop_command, holds_room, room_refusal
from core.jobs import LIVE_LOCK, REINDEX_LOCK, Jobs
from core.jobstatus import JobKind, JobState, JobStatus
from core.taskqueue import INCREMENT, REINDEX, RESUME, ROLLBACK, SYNC, send

# The reindex last started or resumed: the one whose collection may hold the room, since
# no other starts while it does.
LAST_REINDEX = "reindex:last"
# A reindex goes on from its kept work when it failed, was cancelled or paused, or runs with
# its workers gone.
RESUMABLE = (
    *(JobState.FAILED, JobState.CANCELLED, JobState.PAUSED),
    *(JobState.RUNNING, JobState.PLANNING, JobState.FINALIZING),
)


class JobRefused(Exception):
    """Another job holds what this one would change."""


class UnknownJob(LookupError):
    """No job record of that id (never made, or expired)."""


@dataclass(frozen=True)
class Submitted:
    """The job that answers a request: a new one, a running one it joined, one queued behind
    the job that holds the lock, or none (refused)."""

    job_id: str
    joined: bool = False
    refused: str = ""  # why nothing started
    queued: bool = False  # in line: it starts once the lock is free (start_queued)


def submit_sync(
    app: Celery,
    jobs: Jobs,
    source: str,
    kind: JobKind = JobKind.SYNC,
    *,
    force: bool = False,
    wait: bool = False,
) -> Submitted:
    """Start a sync or an increment of the live collection, unless a job already changes it:
    the same kind over the same source (and force) is joined; anything else refuses this one,
    or with `wait` puts it in line, to start once the live lock is free (start_queued). An
    increment always waits: the feed keeps its changes, and a night's must not be skipped for
    a sync still running (from beat, the CLI, the API or a reindex's end alike).
    force: it may delete more than max_delete_share of the live index."""
    job_id = jobs.create(kind, source=source, force=int(force))
    holder = jobs.claim_lock(LIVE_LOCK, job_id)
    if holder is None:
        send(app, SYNC if kind == JobKind.SYNC else INCREMENT, job_id, source)
        return Submitted(job_id)
    running = jobs.get(holder)
    asked = (kind, source, force)
    if running is not None and (running.kind, running.source, running.force) == asked:
        jobs.delete(job_id)
        return Submitted(holder, joined=True)
    what = f"{running.kind} job {holder}" if running else f"job {holder}"
    if wait or kind == JobKind.INCREMENT:
        return queue_behind(app, jobs, job_id, asked, what)
    jobs.delete(job_id)
    return Submitted(
        holder, refused=f"{what} is changing the live collection; try again once it has finished"
    )


def queue_behind(
    app: Celery, jobs: Jobs, job_id: str, asked: tuple[JobKind, str, bool], what: str
) -> Submitted:
    """Put a new job in line for the live lock held by `what`, or join the same one there."""
    for waiting in jobs.in_line(LIVE_LOCK):
        if (waiting.kind, waiting.source, waiting.force) == asked:
            jobs.delete(job_id)
            return Submitted(waiting.id, joined=True)
    jobs.wait_in_line(LIVE_LOCK, job_id, f"waits for {what} to finish with the live collection")
    start_queued(app, jobs)  # the holder may have ended since, with no one in line yet
    return Submitted(job_id, queued=True)


def start_queued(app: Celery, jobs: Jobs) -> str | None:
    """Start the first job in line for the live lock once no running job holds it. Workers
    call it as a job ends and on each nudge (a job that fails ends without its `finalize`).
    The id of the job started, if any."""
    job_id = jobs.claim_next(LIVE_LOCK)
    job = jobs.get(job_id) if job_id else None
    if job is None:
        return None
    jobs.update(job.id, message="")
    send(app, SYNC if job.kind == JobKind.SYNC else INCREMENT, job.id, job.source)
    return job.id


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
    Refused too while a failed or cancelled one's collection is there (resume it or drop it).
    force: it may switch to a collection of fewer than (1 - max_delete_share) x the live one's
    photos."""
    job_id = jobs.create(
        JobKind.REINDEX, source=source, model_version=model_version, force=int(force)
    )
    holder = jobs.claim_lock(REINDEX_LOCK, job_id)
    if holder is None:
        # Checked with the lock held: no resume of that one can start meanwhile.
        held = room_holder(jobs)
        if held is not None:
            jobs.release_lock(REINDEX_LOCK, job_id)
            jobs.delete(job_id)
            return Submitted(held.id, refused=room_refusal(held))
        jobs.remember(LAST_REINDEX, job_id)
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


def room_holder(jobs: Jobs) -> JobStatus | None:
    """The failed or cancelled reindex whose collection is still there, if any."""
    last = jobs.recall(LAST_REINDEX)
    job = jobs.get(last) if last else None
    return job if job is not None and holds_room(job) else None


def submit_resume(app: Celery, jobs: Jobs, job_id: str) -> Submitted:
    """Ask a worker to go on with a reindex from its kept work: the reindex lock is taken for
    it (and a failed or cancelled one queued again), then `indexer.resume` is sent. Refused
    when the job is no reindex, or has nothing to go on with, or another reindex runs or holds
    the room. UnknownJob when no record of it is kept."""
    job = jobs.get(job_id)
    if job is None:
        raise UnknownJob(f"no job {job_id}")
    if job.kind != JobKind.REINDEX:
        return Submitted(job_id, refused=f"job {job_id} is a {job.kind}, not a reindex")
    if job.dropped:
        return Submitted(
            job_id,
            refused=f"reindex job {job_id}'s collection {job.collection} was dropped: "
            "start a new reindex",
        )
    if job.refused:
        # The gate's refusal message names it; any other refusal is the delete guard's.
        guard = "quality gate" if "refused by the quality gate" in job.message else "delete guard"
        return Submitted(
            job_id,
            refused=f"reindex job {job_id}'s switch was refused by the {guard} and its "
            f"work dropped: start it again forced, or drop its collection "
            f"(`{drop_command(job.collection)}`)",
        )
    if job.state not in RESUMABLE:
        waits = "; a worker takes it up when one is free" if job.state == JobState.QUEUED else ""
        return Submitted(job_id, refused=f"reindex job {job_id} is {job.state}{waits}")
    held = room_holder(jobs)
    if held is not None and held.id != job_id:
        return Submitted(held.id, refused=room_refusal(held))
    holder = jobs.reopen(REINDEX_LOCK, job_id, "resumed by an operator; waiting for a worker")
    if holder is not None:
        running = jobs.get(holder)
        version = running.model_version if running else "?"
        return Submitted(
            holder,
            refused=f"reindex job {holder} (model version {version}) is running; wait for it, "
            f"or cancel it (`photosearch index cancel {holder}`)",
        )
    jobs.remember(LAST_REINDEX, job_id)
    send(app, RESUME, job_id)
    return Submitted(job_id)


def submit_rollback(app: Celery, jobs: Jobs) -> str:
    """Ask a worker to point searches back at the previous collection; the job's id."""
    job_id = jobs.create(JobKind.ROLLBACK)
    send(app, ROLLBACK, job_id)
    return job_id
