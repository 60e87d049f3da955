"""Replay rounds: a follower collection brought level with the changes its log holds.

A reindex replays its log in catch-up rounds while the live side goes on changing, then once
more with the live lock held (the drain before the switch); a rollback replays the previous
collection's log before it becomes live again. A round takes the log up to a cut (Redis's
clock) fixed once per round, so a step run again plans the same units; the entries up to the
cut are forgotten once the round has ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from indexer.capture import Lag, Replay
from indexer.planner import shard_unit
from indexer.runtime import Runtime
from indexer.shards import ShardMap, load_map


def replay_units(
    replay: Replay, shards: ShardMap, chunk: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Chunks of logged keys, planned as an increment plans reported keys; and the follower's
    shards over each range logged whole, planned as a sync plans a shard."""
    for start in range(0, len(replay.keys), chunk):
        unit_id = f"replay:{start}"
        yield unit_id, {"kind": "replay", "id": unit_id, "keys": replay.keys[start : start + chunk]}
    seen: set[str] = set()
    for whole in replay.shards:
        for shard in shards.overlapping(whole.lo, whole.hi):
            if shard.id not in seen:
                seen.add(shard.id)
                yield shard_unit(shard)


def start_replay(rt: Runtime, job_id: str, round_: int, collection: str) -> int:
    """Open a round replaying the collection's log up to now; the number of units."""
    job_key = rt.work.keys(job_id)[0]
    # The cut is fixed by the first call: a step run again after a crash plans the same units.
    rt.redis.hsetnx(job_key, f"cut:{round_}", rt.capture.now())
    cut = int(rt.redis.hget(job_key, f"cut:{round_}") or 0)
    replay = rt.capture.replay(collection, cut)
    units = list(
        replay_units(replay, load_map(rt.store, collection), rt.settings.indexer.feed_chunk)
    )
    rt.jobs.update(job_id, capture_cut=cut)
    rt.work.start_round(job_id, round_, units)
    rt.jobs.add(job_id, replayed=len(replay.keys))
    return len(units)


def end_replay(rt: Runtime, job_id: str, collection: str, cut: int) -> Lag:
    """The round up to cut has ended: its entries are forgotten; what waits now."""
    if cut:
        rt.capture.trim(collection, cut)
    return record_lag(rt, job_id, collection)


def record_lag(rt: Runtime, job_id: str, collection: str) -> Lag:
    """Show in the job record what waits to be replayed, and since when."""
    lag = rt.capture.lag(collection)
    rt.jobs.update(job_id, lag=lag.keys, lag_shards=lag.shards, lag_oldest_at=lag.oldest_at or 0.0)
    return lag
