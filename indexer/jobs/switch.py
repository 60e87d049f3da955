"""The switch: the aliases moved under the alias lock, the old live collection made to follow
the new one for rollback, and the popular queries pre-warmed for the new model version before
it (so the switch is no miss storm)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from redis import Redis
from redis.lock import Lock

from core.embedding.arrays import Embeddings
from core.jobs import Jobs
from core.jobstatus import JobState
from core.querycache import prewarm
from core.settings_api import ApiSettings
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore
from indexer.plan.shards import load_map
from indexer.queue.capture import ChangeLog
from indexer.queue.records import JobRecords


def switch(
    job_id: str,
    *,
    store: VectorStore,
    records: JobRecords,
    lock: Lock,
    rollback_days: int,
    now: Callable[[], float] = time.time,
) -> None:
    """With the live lock held and the last changes replayed: move the aliases (under the
    alias `lock`), make the old live collection follow the new; the job ends (its locks
    released)."""
    jobs = records.jobs
    job = jobs.get(job_id)
    assert job is not None
    collection = job.collection
    with lock:
        aliases = store.aliases()
        if aliases.get(LIVE_ALIAS) == collection:  # a run of this step that died after it
            previous = aliases.get(PREVIOUS_ALIAS)
        else:
            previous = aliases.get(LIVE_ALIAS)
            store.set_aliases({LIVE_ALIAS: collection, PREVIOUS_ALIAS: previous})
        hand_over(records.capture, collection, previous, rollback_days=rollback_days, now=now)
        # What the verification repaired, the old live collection missed too: its log holds
        # it for a rollback to replay (a log it has only while it follows).
        repaired = records.listings.repaired_keys(job_id)
        if previous is not None and rollback_days and repaired:
            records.capture.capture_mapped(load_map(store, collection), repaired)
    locked = now() - job.locked_at
    jobs.update(job_id, lock_s=round(locked, 3))
    # What the quality gate said (passed, overridden, or that it had no judgement set).
    gate = f"; {json.loads(job.quality)['message']}" if job.quality else ""
    jobs.finish(
        job_id,
        JobState.DONE,
        f"{LIVE_ALIAS} switched from {previous or 'nothing'} to {collection}; "
        f"{job.warmed} popular queries pre-warmed; the live lock held {locked:.1f} s{gate}",
    )
    records.work.drop(job_id, jobs.ttl_s)
    records.listings.forget(job_id)


def hand_over(
    capture: ChangeLog,
    live: str,
    previous: str | None,
    *,
    rollback_days: int,
    now: Callable[[], float] = time.time,
) -> None:
    """The new live collection follows nothing; the previous one follows it for
    rollback_days (the live side's changes are logged for it)."""
    capture.unfollow(live)
    if previous is not None:
        capture.unfollow(previous)  # a log of changes from before it was live is moot
        if rollback_days:
            capture.follow(previous, until=now() + rollback_days * 86400)


def warm_cache(
    job_id: str,
    model_version: int,
    *,
    redis: Redis,
    prefix: str,
    jobs: Jobs,
    embed: Callable[[Sequence[str], int], Embeddings],
    api: ApiSettings,
) -> int:
    """Embed the popular recent queries with the new version (`embed(texts, version)`), so
    the switch is no miss storm; the cache's `redis`. How many were warmed.

    A failure here costs latency after the switch, not correctness: it is noted, not fatal.
    """
    try:
        return prewarm(
            redis,
            prefix,
            model_version,
            lambda texts: embed(texts, model_version),
            days=api.popular_days,
            n=api.prewarm_queries,
            ttl_s=api.cache_ttl_s,
        )
    except Exception as exc:  # Redis or Triton: the switch goes on with a cold cache
        jobs.note_problems(job_id, [f"cache pre-warm skipped: {type(exc).__name__}: {exc}"])
        return 0
