"""Replay rounds: a follower collection brought level with the changes its log holds.

A reindex replays its log in catch-up rounds while the live side goes on changing, then once
more with the live lock held (the drain before the switch); a rollback replays the previous
collection's log before it becomes live again. A round takes the log up to a cut (Redis's
clock) fixed once per round, so a step run again plans the same units; the entries up to the
cut are forgotten once the round has ended.
"""

from __future__ import annotations

from collections.abc import Iterator

from core.vectorstore import VectorStore
from indexer.plan.shards import ShardMap, load_map
from indexer.queue.capture import Lag, Replay
from indexer.queue.messages import ReplayUnit, ShardUnit, Unit
from indexer.queue.records import JobRecords


def replay_units(replay: Replay, shards: ShardMap, chunk: int) -> Iterator[Unit]:
    """Chunks of logged keys, planned as an increment plans reported keys; and the follower's
    shards over each range logged whole, planned as a sync plans a shard."""
    for start in range(0, len(replay.keys), chunk):
        yield ReplayUnit(f"replay:{start}", tuple(replay.keys[start : start + chunk]))
    seen: set[str] = set()
    for whole in replay.shards:
        for shard in shards.overlapping(whole.lo, whole.hi):
            if shard.id not in seen:
                seen.add(shard.id)
                yield ShardUnit(shard)


def start_replay(
    job_id: str,
    round_: int,
    collection: str,
    *,
    store: VectorStore,
    records: JobRecords,
    chunk: int,
) -> int:
    """Open a round replaying the collection's log up to now (`chunk` keys a unit); the
    number of units."""
    work, jobs, capture = records.work, records.jobs, records.capture
    job_key = work.keys(job_id)[0]
    # The cut is fixed by the first call: a step run again after a crash plans the same units.
    jobs.redis.hsetnx(job_key, f"cut:{round_}", capture.now())
    cut = int(jobs.redis.hget(job_key, f"cut:{round_}") or 0)
    replay = capture.replay(collection, cut)
    units = list(replay_units(replay, load_map(store, collection), chunk))
    jobs.update(job_id, capture_cut=cut)
    work.start_round(job_id, round_, units)
    jobs.add(job_id, replayed=len(replay.keys))
    return len(units)


def end_replay(records: JobRecords, job_id: str, collection: str, cut: int) -> Lag:
    """The round up to cut has ended: its entries are forgotten; what waits now."""
    if cut:
        records.capture.trim(collection, cut)
    return record_lag(records, job_id, collection)


def record_lag(records: JobRecords, job_id: str, collection: str) -> Lag:
    """Show in the job record what waits to be replayed, and since when."""
    lag = records.capture.lag(collection)
    records.jobs.update(
        job_id, lag=lag.keys, lag_shards=lag.shards, lag_oldest_at=lag.oldest_at or 0.0
    )
    return lag
