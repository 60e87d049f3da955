"""Moving a job's rounds on: the tokens it has room for, published (`pump`), and the nudge
every worker sends now and then, which moves on a job whose tokens were lost, that waits for a
step no batch ends, or that was paused by an outage now over.

The tasks (indexer/tasks.py) pump after each unit and batch; a round's end sends `finalize`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.worker import state as worker_state

from core.deployment import Presence
from core.jobstatus import FINISHED, JobKind, JobPhase, JobState
from core.settings_indexer import IndexerSettings
from core.submit import start_queued
from core.taskqueue import EMBED_BATCH, FINALIZE, INCREMENT, PLAN, REINDEX, SYNC, settings_of
from indexer.jobs import pause as pausing
from indexer.leases import held_tokens
from indexer.queue.workqueue import WorkQueue
from indexer.runtime import Runtime, get_runtime

log = logging.getLogger(__name__)

# Shards are planned while fewer batches than this many times the broker's room wait in Redis.
PLAN_AHEAD = 4
# The task that starts a sync or an increment: sent again when one paused in it goes on.
FIRST_TASK = {JobKind.SYNC: SYNC, JobKind.INCREMENT: INCREMENT}


def triton_ready(rt: Runtime) -> Callable[[int], bool]:
    """Whether Triton serves a model version, asked from a task thread."""
    return lambda version: rt.run(rt.embedder.is_ready(version), timeout=30)


def pump(app: Celery, work: WorkQueue, s: IndexerSettings, job_id: str) -> bool:
    """Publish the tokens the job has room for: embedding up to max_queued_batches, planning
    while the batches waiting are few. True when the round turned out to have ended."""
    tokens = work.reserve(
        job_id,
        max_embed=s.max_queued_batches,
        max_plan=s.planners,
        plan_ahead=PLAN_AHEAD * s.max_queued_batches,
        ttl_s=s.visibility_timeout_s,
        lease_s=s.lease_s,
    )
    for token in tokens.plan:
        app.tasks[PLAN].apply_async((job_id,), task_id=token)
    for token in tokens.embed:
        app.tasks[EMBED_BATCH].apply_async((job_id,), task_id=token)
    return tokens.round_ended


def after(app: Celery, rt: Runtime, job_id: str, round_ended: bool) -> None:
    if pump(app, rt.work, rt.settings.indexer, job_id) or round_ended:
        app.tasks[FINALIZE].delay(job_id)


def nudge(app: Celery, rt: Runtime, recent: int = 100) -> None:
    """Move every unfinished job on, whatever was lost: tokens its room allows (the sweep gives
    back the room and work of lost ones), `finalize` where a round has ended or a job waits
    (a reindex for its index or the live lock, a rollback for the live lock), and a paused
    job once its dependencies answer."""
    pausing.record_unrecorded(rt.jobs)
    start_queued(app, rt.jobs)  # a job in line for the live lock, its holder ended unannounced
    for job in rt.jobs.recent(recent):
        if job.state in (*FINISHED, JobState.QUEUED):
            continue
        if job.state == JobState.PAUSED and not pausing.go_on(
            job, jobs=rt.jobs, ready=triton_ready(rt), store=rt.store
        ):
            continue
        if job.kind == JobKind.REINDEX and job.phase == JobPhase.NONE:  # paused before it started
            app.tasks[REINDEX].delay(job.id, job.model_version, job.source)
            continue
        first = FIRST_TASK.get(job.kind)
        if first and job.state == JobState.PAUSED and job.resume_state == JobState.QUEUED:
            # Paused in its first task (the record as read before it went on just now): that
            # task again, from the start.
            app.tasks[first].delay(job.id, job.source)
            continue
        ended = pump(app, rt.work, rt.settings.indexer, job.id)
        waiting = (
            job.kind == JobKind.REINDEX and job.phase in (JobPhase.INDEXING, JobPhase.CATCH_UP)
        ) or (job.kind == JobKind.ROLLBACK and job.phase != JobPhase.REPLAY)
        if ended or waiting or rt.work.round_done(job.id, job.round):
            app.tasks[FINALIZE].delay(job.id)


def held_requests() -> list[Any]:
    """The requests this worker process holds: received, running, or waiting for a retry's
    countdown (a retry waits up to retry_backoff_max_s, which may pass the lease)."""
    held: list[Any] = list(worker_state.requests.values())  # one C call: safe beside others
    for _ in range(3):
        try:
            return held + list(worker_state.scheduled_requests)  # type: ignore[attr-defined]
        except RuntimeError:  # the set changed while it was read: read it again
            continue
    return held


def heartbeat(work: WorkQueue) -> int:
    """Renew the lease of every token this worker process holds."""
    return work.heartbeat(held_tokens(held_requests(), (PLAN, EMBED_BATCH)))


def nudging(app: Celery, stop: threading.Event) -> threading.Thread:
    """A worker's thread that nudges the jobs every min(30 s, visibility timeout, lease) until
    stop, and its heartbeat's, which renews the lease of the tokens it holds every third of it.

    Every worker passes here as it starts: it marks the Redis as PhotoSearch's (before this
    returns, so a command run once the worker has started finds the mark) and says, round
    after round, that the worker runs (core/deployment.py).
    """
    settings = settings_of(app)
    s = settings.indexer
    interval = min(30.0, float(s.visibility_timeout_s), s.lease_s)
    presence = Presence(settings.redis.url, settings.redis.prefix, ttl_s=3 * interval)
    presence.renew()

    def beat() -> None:
        while not stop.wait(s.lease_s / 3):
            try:
                heartbeat(get_runtime(settings).work)
            except Exception:  # Redis down: the next beat tries again
                log.warning("the heartbeat of the held tasks failed", exc_info=True)

    def run() -> None:
        while not stop.wait(interval):
            presence.renew()
            try:
                nudge(app, get_runtime(settings))
            except Exception:  # Redis down, say: the next round of nudges tries again
                log.exception("nudging the index jobs failed")
        presence.close()

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
    thread = threading.Thread(target=run, name="nudge-jobs", daemon=True)
    thread.start()
    return thread
