"""A rollback: the previous collection, which followed the live one's changes for
rollback_days after the switch, replays its log under the live lock and becomes live again."""

from __future__ import annotations

import time
from collections.abc import Callable

from redis.lock import Lock

from core.jobs import LIVE_LOCK
from core.jobstatus import FINISHED, JobPhase, JobState
from core.settings_indexer import IndexerSettings
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, model_version_of
from indexer.jobs.catchup import end_replay, record_lag
from indexer.jobs.reindex import replay
from indexer.jobs.switch import hand_over
from indexer.jobs.sync import IndexerError
from indexer.queue.capture import ChangeLog
from indexer.queue.records import JobRecords


def stale(
    capture: ChangeLog,
    previous: str,
    *,
    rollback_days: int,
    now: Callable[[], float] = time.time,
) -> str | None:
    """Why the previous collection may not become live again (it no longer follows the live
    one's changes), or None."""
    until = capture.followers().get(previous)
    days = rollback_days
    if until is None or not until:
        return (
            f"{previous} has received no change since the switch (rollback_days={days}): it "
            f"would serve deleted photos and miss new ones"
        )
    if until < now():
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
        return (
            f"{previous} stopped receiving changes at {when}, rollback_days={days} after the "
            f"switch: it would serve deleted photos and miss new ones"
        )
    return None


def start_rollback(
    job_id: str,
    *,
    store: VectorStore,
    records: JobRecords,
    settings: IndexerSettings,
    now: Callable[[], float] = time.time,
) -> None:
    """Take the live lock, then replay the previous collection's log into it (the round
    that ends in `advance_rollback`, whose swap takes the alias lock)."""
    jobs = records.jobs
    job = jobs.get(job_id)
    if job is None or job.state in FINISHED:
        return
    aliases = store.aliases()
    previous, live = aliases.get(PREVIOUS_ALIAS), aliases.get(LIVE_ALIAS)
    if previous is None or live is None:
        raise IndexerError("nothing to roll back to: there is no previous collection")
    why = stale(records.capture, previous, rollback_days=settings.rollback_days, now=now)
    if why is not None:
        raise IndexerError(
            f"rollback refused: {why}. Reindex with its model version instead "
            f"(`photosearch index reindex --model-version {model_version_of(previous)}`)"
        )
    holder = jobs.claim_lock(LIVE_LOCK, job_id)
    if holder is not None:
        jobs.update(
            job_id,
            state=JobState.RUNNING,
            message=f"waiting for job {holder} on the live collection",
        )
        return
    jobs.start(
        job_id,
        state=JobState.RUNNING,
        phase=JobPhase.REPLAY,
        collection=previous,
        model_version=model_version_of(previous),
        source=jobs.recall("source") or settings.source or "",
        locked_at=now(),
        message=f"replaying the changes since the switch into {previous}",
    )
    replay(job_id, 0, previous, store=store, records=records, settings=settings)


def advance_rollback(
    job_id: str,
    *,
    store: VectorStore,
    records: JobRecords,
    lock: Lock,
    settings: IndexerSettings,
    now: Callable[[], float] = time.time,
) -> None:
    """A rollback's next step: take the lock (it waited), or swap once the replay ended."""
    jobs = records.jobs
    job = jobs.get(job_id)
    if job is None or job.state in (*FINISHED, JobState.PAUSED):
        return
    if job.phase != JobPhase.REPLAY:
        start_rollback(job_id, store=store, records=records, settings=settings, now=now)
        return
    if not records.work.round_done(job_id, 0):
        record_lag(records, job_id, job.collection)
        return
    end_replay(records, job_id, job.collection, job.capture_cut)
    swapped = rollback(
        store=store,
        capture=records.capture,
        lock=lock,
        rollback_days=settings.rollback_days,
        now=now,
    )
    jobs.finish(job_id, JobState.DONE, swapped)
    records.work.drop(job_id, jobs.ttl_s)


def rollback(
    *,
    store: VectorStore,
    capture: ChangeLog,
    lock: Lock,
    rollback_days: int,
    now: Callable[[], float] = time.time,
) -> str:
    """Swap the live and previous collections (under the alias `lock`): searches go back to
    the model before. The collection left follows the live one in turn, for rollback_days."""
    with lock:
        aliases = store.aliases()
        previous, live = aliases.get(PREVIOUS_ALIAS), aliases.get(LIVE_ALIAS)
        if previous is None:
            raise IndexerError("nothing to roll back to: there is no previous collection")
        store.set_aliases({LIVE_ALIAS: previous, PREVIOUS_ALIAS: live})
        hand_over(capture, previous, live, rollback_days=rollback_days, now=now)
    return (
        f"{LIVE_ALIAS} -> {previous} (model version {model_version_of(previous)}); "
        f"{PREVIOUS_ALIAS} -> {live}"
    )
