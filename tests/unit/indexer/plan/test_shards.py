"""Shards: ranges of keys that partition the key space, labelled by their first key."""

from __future__ import annotations

import pytest

from indexer.plan.shards import ShardMap, ShardRange, prefix_range, split_bounds

KEYS = ["", "a", "a/b.jpg", "a0", "b", "photos/2024/06/x.jpg", "z", "\U0010fffd"]


def test_a_map_covers_every_key_once_and_starts_at_the_empty_key() -> None:
    shards = ShardMap(["m", "c", "x"])
    assert shards.labels == ["", "c", "m", "x"]
    ranges = shards.ranges()
    assert ranges == [
        ShardRange("", "c"),
        ShardRange("c", "m"),
        ShardRange("m", "x"),
        ShardRange("x"),
    ]
    for key in KEYS:
        holding = [r for r in ranges if r.contains(key)]
        assert len(holding) == 1, key
        assert holding[0].lo == shards.label_of(key)
    assert ShardMap().ranges() == [ShardRange("")]


def test_the_shards_overlapping_a_range() -> None:
    shards = ShardMap(["c", "m", "x"])
    assert [r.lo for r in shards.overlapping("d", "e")] == ["c"]
    assert [r.lo for r in shards.overlapping("c", "m")] == ["c"]
    assert [r.lo for r in shards.overlapping("b", "n")] == ["", "c", "m"]
    assert [r.lo for r in shards.overlapping("y", None)] == ["x"]
    assert [r.lo for r in shards.overlapping("", None)] == ["", "c", "m", "x"]


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [("", ("", None)), ("a/", ("a/", "a0")), ("2024/06/", ("2024/06/", "2024/060"))],
)
def test_a_prefix_is_a_range_of_keys(prefix: str, expected: tuple[str, str | None]) -> None:
    assert prefix_range(prefix) == expected
    lo, hi = expected
    inside = [k for k in [*KEYS, prefix + "x", prefix + "\U0010fffd"] if k.startswith(prefix)]
    assert all(ShardRange(lo, hi).contains(k) for k in inside)
    outside = [k for k in KEYS if not k.startswith(prefix)]
    assert not any(ShardRange(lo, hi).contains(k) for k in outside)


def test_split_bounds_cut_every_size_keys() -> None:
    keys = [f"k{i:02d}" for i in range(10)]
    assert list(split_bounds(iter(keys), 4)) == ["k04", "k08"]
    assert list(split_bounds(iter(keys), 10)) == []
    assert list(split_bounds(iter(keys[:1]), 1)) == []


def test_a_shard_id_tells_a_split_part_from_its_parent() -> None:
    parent, first = ShardRange("a", "z"), ShardRange("a", "m")
    assert parent.lo == first.lo and parent.id != first.id
    assert ShardRange.from_wire(first.to_wire()) == first
    assert ShardRange.from_wire(ShardRange("q").to_wire()) == ShardRange("q")
