"""What crosses the work queue (indexer/queue/workqueue.py): a batch of photos to embed and a
unit of a round to plan, each read from and written to its JSON in Redis exactly as the
previous release wrote it, so that the work a worker of that release queued is still taken.

A unit is one of four kinds: a shard to list and plan (a sync's, a reindex's load, a range of
keys logged whole), a chunk of the change feed, a chunk of logged or popular keys, or a shard
of a reindex's grouping pass. Each says the id it is committed under, once per round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, assert_never

from indexer.plan.catalog import Photo
from indexer.plan.shards import ShardRange

Wire = dict[str, Any]  # a message as its JSON object


@dataclass(frozen=True)
class Batch:
    """Photos to embed, each with the label of the shard its point is written under."""

    photos: tuple[tuple[Photo, str], ...]

    def to_wire(self) -> Wire:
        return {"photos": [{**photo.to_wire(), "shard": label} for photo, label in self.photos]}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Batch:
        return cls(
            tuple(
                (Photo.from_wire({k: v for k, v in p.items() if k != "shard"}), str(p["shard"]))
                for p in data["photos"]
            )
        )


class UnitKind(StrEnum):
    """A unit's "kind" in its JSON: which planner takes it."""

    SHARD = "shard"
    FEED = "feed"
    REPLAY = "replay"
    GROUP = "group"


@dataclass(frozen=True)
class ShardUnit:
    """A shard to plan; confirm: one held back earlier, now within the job's budget."""

    shard: ShardRange
    confirm: bool = False
    kind: ClassVar[UnitKind] = UnitKind.SHARD

    @property
    def id(self) -> str:
        return self.shard.id

    def to_wire(self) -> Wire:
        wire: Wire = {"kind": self.kind.value, **self.shard.to_wire()}
        if self.confirm:
            wire["confirm"] = True
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ShardUnit:
        return cls(ShardRange.from_wire(data), bool(data.get("confirm")))


@dataclass(frozen=True)
class FeedUnit:
    """The chunk `seq` of the change feed (each chunk read adds the next while it has more)."""

    seq: int
    kind: ClassVar[UnitKind] = UnitKind.FEED

    @property
    def id(self) -> str:
        return f"feed:{self.seq}"

    def to_wire(self) -> Wire:
        return {"kind": self.kind.value, "seq": self.seq}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> FeedUnit:
        return cls(int(data["seq"]))


@dataclass(frozen=True)
class ReplayUnit:
    """Keys to plan as an increment plans them: a chunk of a follower's log (a catch-up's),
    or of the photos whose popularity changed; `id` names the chunk."""

    id: str
    keys: tuple[str, ...]
    kind: ClassVar[UnitKind] = UnitKind.REPLAY

    def to_wire(self) -> Wire:
        return {"kind": self.kind.value, "id": self.id, "keys": list(self.keys)}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ReplayUnit:
        return cls(str(data["id"]), tuple(str(key) for key in data["keys"]))


@dataclass(frozen=True)
class GroupUnit:
    """A shard of a reindex's grouping pass (indexer/jobs/regroup.py)."""

    shard: ShardRange
    kind: ClassVar[UnitKind] = UnitKind.GROUP

    @property
    def id(self) -> str:
        return self.shard.id

    def to_wire(self) -> Wire:
        return {"kind": self.kind.value, **self.shard.to_wire()}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> GroupUnit:
        return cls(ShardRange.from_wire(data))


Unit = ShardUnit | FeedUnit | ReplayUnit | GroupUnit


def unit_from_wire(data: Mapping[str, Any]) -> Unit:
    """A unit read back from its JSON, by its kind; ValueError for a kind no release wrote."""
    kind = UnitKind(data["kind"])
    if kind is UnitKind.SHARD:
        return ShardUnit.from_wire(data)
    if kind is UnitKind.FEED:
        return FeedUnit.from_wire(data)
    if kind is UnitKind.REPLAY:
        return ReplayUnit.from_wire(data)
    if kind is UnitKind.GROUP:
        return GroupUnit.from_wire(data)
    assert_never(kind)
