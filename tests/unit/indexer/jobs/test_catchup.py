"""A replay round's units: the logged keys in chunks, planned as an increment plans reported
keys, and each of the follower's shards over a range logged whole, once; a round fixed by
its cut, and what waits once it has ended."""

from __future__ import annotations

from core.jobstatus import JobKind
from core.vectorstore import VectorStore
from indexer.jobs.catchup import end_replay, record_lag, replay_units, start_replay
from indexer.plan.shards import ShardMap, ShardRange
from indexer.queue.capture import Replay
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION


def test_logged_keys_come_in_chunks_and_whole_ranges_as_the_followers_shards_once() -> None:
    replay = Replay(
        cut=5,
        keys=["a/1.jpg", "a/2.jpg", "b/1.jpg"],
        shards=[ShardRange("b", "d"), ShardRange("c", None)],
    )
    units = list(replay_units(replay, ShardMap(["", "c", "e"]), chunk=2))
    assert [(unit.id, unit.to_wire()) for unit in units] == [
        ("replay:0", {"kind": "replay", "id": "replay:0", "keys": ["a/1.jpg", "a/2.jpg"]}),
        ("replay:2", {"kind": "replay", "id": "replay:2", "keys": ["b/1.jpg"]}),
        *(
            (ShardRange(lo, hi).id, {"kind": "shard", "lo": lo, "hi": hi})
            for lo, hi in (("", "c"), ("c", "e"), ("e", None))
        ),
    ]


def test_a_replay_round_plans_what_the_live_side_logged_and_its_end_forgets_it(
    records: JobRecords, store: VectorStore
) -> None:
    follower = COLLECTION
    records.capture.follow(follower)
    records.capture.capture(ShardRange(""), ["a/1.jpg", "a/2.jpg", "b/1.jpg"])
    job_id = records.jobs.create(JobKind.REINDEX)
    units = start_replay(job_id, 2, follower, store=store, records=records, chunk=2)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (units, job.replayed) == (2, 3)
    assert record_lag(records, job_id, follower).keys == 3
    # Run again after a crash, the step plans the same round: its cut was fixed the first time.
    records.capture.capture(ShardRange(""), ["c/1.jpg"])
    start_replay(job_id, 2, follower, store=store, records=records, chunk=2)
    again = records.jobs.get(job_id)
    assert again is not None and again.capture_cut == job.capture_cut
    lag = end_replay(records, job_id, follower, job.capture_cut)
    assert lag.keys == 1  # what was logged after the cut still waits
