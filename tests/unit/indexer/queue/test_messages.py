"""The messages of the work queue read what the previous release wrote and write it back the
same: a batch and a unit of each kind, as its planners and scripts put them in Redis (the
JSON below was written by that release's code)."""

from __future__ import annotations

import json

import pytest

from indexer.plan.catalog import Photo
from indexer.plan.shards import ShardRange
from indexer.queue.messages import (
    Batch,
    FeedUnit,
    GroupUnit,
    ReplayUnit,
    ShardUnit,
    UnitKind,
    unit_from_wire,
)

PREVIOUS_BATCH = (
    '{"photos": [{"photo_id": "a/1", "key": "a/1.jpg", "version": "1700000000.0:2048", '
    '"meta_hash": "5d41402abc4b2a76", "metadata": {"title": "a red bicycle", "tags": '
    '["bicycle"]}, "shard": "a/"}, {"photo_id": "b/2", "key": "b/2.png", "version": '
    '"1700000001.0:512", "meta_hash": "", "metadata": null, "shard": "a/"}]}'
)
# Each unit as (its id, its JSON), as the previous release queued them.
PREVIOUS_UNITS = [
    ("a/\x00m/", '{"kind": "shard", "lo": "a/", "hi": "m/"}'),
    ("m/\x00", '{"kind": "shard", "lo": "m/", "hi": null, "confirm": true}'),
    ("feed:4", '{"kind": "feed", "seq": 4}'),
    ("replay:0", '{"kind": "replay", "id": "replay:0", "keys": ["a/1.jpg", "b/2.jpg"]}'),
    ("popularity:1", '{"kind": "replay", "id": "popularity:1", "keys": ["c/3.jpg"]}'),
    ("\x00a/", '{"kind": "group", "lo": "", "hi": "a/"}'),
]


def test_a_batch_of_the_previous_release_is_read_and_written_back_the_same() -> None:
    batch = Batch.from_wire(json.loads(PREVIOUS_BATCH))
    first, second = batch.photos
    assert first == (
        Photo(
            "a/1",
            "a/1.jpg",
            "1700000000.0:2048",
            "5d41402abc4b2a76",
            {"title": "a red bicycle", "tags": ["bicycle"]},
        ),
        "a/",
    )
    assert second == (Photo("b/2", "b/2.png", "1700000001.0:512"), "a/")
    assert json.dumps(batch.to_wire()) == PREVIOUS_BATCH


@pytest.mark.parametrize(("unit_id", "wire"), PREVIOUS_UNITS)
def test_a_unit_of_each_kind_of_the_previous_release_is_read_and_written_back_the_same(
    unit_id: str, wire: str
) -> None:
    unit = unit_from_wire(json.loads(wire))
    assert unit.id == unit_id
    assert unit.kind == UnitKind(json.loads(wire)["kind"])
    assert json.dumps(unit.to_wire()) == wire


def test_units_are_read_as_their_kind() -> None:
    read = [unit_from_wire(json.loads(wire)) for _, wire in PREVIOUS_UNITS]
    assert read == [
        ShardUnit(ShardRange("a/", "m/")),
        ShardUnit(ShardRange("m/"), confirm=True),
        FeedUnit(4),
        ReplayUnit("replay:0", ("a/1.jpg", "b/2.jpg")),
        ReplayUnit("popularity:1", ("c/3.jpg",)),
        GroupUnit(ShardRange("", "a/")),
    ]


def test_a_unit_of_a_kind_no_release_wrote_is_refused() -> None:
    with pytest.raises(ValueError, match="'split'"):
        unit_from_wire({"kind": "split", "lo": ""})
