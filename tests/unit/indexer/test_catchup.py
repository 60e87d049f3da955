"""A replay round's units: the logged keys in chunks, planned as an increment plans reported
keys, and each of the follower's shards over a range logged whole, once."""

from __future__ import annotations

from indexer.capture import Replay
from indexer.catchup import replay_units
from indexer.shards import ShardMap, ShardRange


def test_logged_keys_come_in_chunks_and_whole_ranges_as_the_followers_shards_once() -> None:
    replay = Replay(
        cut=5,
        keys=["a/1.jpg", "a/2.jpg", "b/1.jpg"],
        shards=[ShardRange("b", "d"), ShardRange("c", None)],
    )
    units = list(replay_units(replay, ShardMap(["", "c", "e"]), chunk=2))
    assert units == [
        ("replay:0", {"kind": "replay", "id": "replay:0", "keys": ["a/1.jpg", "a/2.jpg"]}),
        ("replay:2", {"kind": "replay", "id": "replay:2", "keys": ["b/1.jpg"]}),
        *(
            (ShardRange(lo, hi).id, {"kind": "shard", "lo": lo, "hi": hi})
            for lo, hi in (("", "c"), ("c", "e"), ("e", None))
        ),
    ]
