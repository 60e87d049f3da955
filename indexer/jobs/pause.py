"""A job through a dependency's outage: paused, not failed, and on again once it answers.

A reindex runs for days and a rollback replays days of changes; a nightly sync or increment (and
the weekly full sync) failed by an outage would leave the catalogue a day behind and start over
the next night. An outage of Triton, the store or Redis longer than a batch's retries (about an
hour) must cost that hour, not the job. A task of a job that fails for good on a dependency
gives its work back (first in line, counted nowhere) and pauses the job; the workers' nudges ask
the dependencies every interval and set the job going again when they answer. A paused job keeps
its locks: a paused sync still holds the live collection, so no other sync, increment or switch
changes it under the sync's half-applied listing. While Redis itself is down nothing can be
recorded: the worker remembers the pause and writes it into the job's problems once Redis
answers (the work of the failed tasks comes back by the queue's sweep, as for a lost token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from core.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from core.jobs import Jobs
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.vectorstore import LIVE_ALIAS, VectorStore, model_version_of

# Every kind of job that changes a collection (a rollback included) pauses through an outage.
PAUSING = (JobKind.REINDEX, JobKind.ROLLBACK, JobKind.SYNC, JobKind.INCREMENT)
REDIS_DOWN = (RedisConnectionError, RedisTimeout)

_unrecorded: dict[str, tuple[str, float]] = {}  # job id -> (reason, since): Redis was down
_lock = threading.Lock()


def dependency(exc: BaseException) -> str:
    if isinstance(exc, TritonUnavailable | TritonTimeout | InferenceFailed):
        return "Triton"
    if isinstance(exc, ModelVersionUnavailable):
        return "the model version in Triton"
    if isinstance(exc, REDIS_DOWN):
        return "Redis"
    if isinstance(exc, OSError):
        return "the source or the store's disk"
    return "the vector store"


def pause(
    jobs: Jobs,
    job_id: str,
    exc: BaseException,
    now: Callable[[], float] = time.time,
    *,
    first_step: bool = False,
) -> bool:
    """Pause the job for this failure if it is one that pauses; True when it did (or would
    have, had Redis answered: then it is recorded later). first_step: the job's first task
    failed (a sync's listing, an increment's feed): it goes on queued, to be started again."""
    reason = f"{dependency(exc)} did not answer past the retry budget: {type(exc).__name__}: {exc}"
    try:
        job = jobs.get(job_id)
        if job is None or job.kind not in PAUSING or job.state in FINISHED:
            return False
        if job.state != JobState.PAUSED:
            jobs.update(
                job_id,
                state=JobState.PAUSED,
                resume_state=JobState.QUEUED if first_step else job.state,
                paused_at=now(),
                message=f"paused: {reason}; it goes on by itself once it answers",
            )
        return True
    except REDIS_DOWN:
        with _lock:
            _unrecorded.setdefault(job_id, (reason, now()))
        return True


def record_unrecorded(jobs: Jobs, now: Callable[[], float] = time.time) -> None:
    """Write the pauses that Redis could not take when they happened (Redis answers now)."""
    with _lock:
        pending = dict(_unrecorded)
        _unrecorded.clear()
    for job_id, (reason, since) in pending.items():
        jobs.note_problems(
            job_id, [f"paused {now() - since:.0f} s, until Redis answered again: {reason}"]
        )


def unanswered(job: JobStatus, *, ready: Callable[[int], bool], store: VectorStore) -> str | None:
    """Which dependency of the job still does not answer, or None. `ready`: whether Triton
    serves a model version."""
    try:
        # One paused before its start has no collection yet: the store answering will do.
        aliases = store.aliases()
        if job.collection:
            store.count(job.collection)
    except Exception as exc:
        return f"the vector store: {type(exc).__name__}: {exc}"
    # A sync paused before its start embeds with the live collection's model, once it has one.
    live = aliases.get(LIVE_ALIAS)
    version = job.model_version or (model_version_of(live) if live else 0)
    if not version:
        return None
    try:
        if not ready(version):
            return f"model version {version} is not ready in Triton"
    except Exception as exc:
        return f"Triton: {type(exc).__name__}: {exc}"
    return None


def go_on(
    job: JobStatus,
    *,
    jobs: Jobs,
    ready: Callable[[int], bool],
    store: VectorStore,
    now: Callable[[], float] = time.time,
) -> bool:
    """Set a paused job going again if its dependencies answer; True when it did."""
    if job.state != JobState.PAUSED or unanswered(job, ready=ready, store=store) is not None:
        return False
    paused_s = now() - job.paused_at if job.paused_at else 0.0
    jobs.note_problems(job.id, [f"paused {paused_s:.0f} s: {job.message}"])
    jobs.update(
        job.id,
        state=job.resume_state or JobState.RUNNING,
        message=f"went on after a pause of {paused_s:.0f} s",
    )
    return True
