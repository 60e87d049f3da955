"""Shards of a catalogue: ranges of source keys, each point labelled with its range's first key.

A shard is the range [lo, hi) of keys (paths relative to the source's root), listed in key
order at the cost of its own size: S3 starts a listing after a key, a folder walk skips the
folders outside the range. Every point carries its shard's label (lo) in an indexed payload
field, so a shard's points are read at the cost of the shard too.

The map of a collection is its labels: a facet over the field, read from the collection
itself, so no other record of it can be lost or disagree with the points. A shard that grew
past twice the shard size is split (indexer/plan/planner.py) and the points of its new parts are
relabelled; a shard whose points are all gone leaves the map, and its range joins the one
before it. The first shard always starts at "".
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from core.vectorstore import VectorStore

# Past the last character of any key: the end of a prefix's range ("a/" -> ["a/", "a0")).
_MAX_CHAR = "\U0010ffff"


@dataclass(frozen=True)
class ShardRange:
    """The keys [lo, hi) of one shard; lo is the label its points carry."""

    lo: str
    hi: str | None = None  # None: to the end of the key space

    @property
    def id(self) -> str:
        """Unique within a round: a split's first part keeps lo, not hi."""
        return f"{self.lo}\x00{self.hi if self.hi is not None else ''}"

    def contains(self, key: str) -> bool:
        return key >= self.lo and (self.hi is None or key < self.hi)

    def to_wire(self) -> dict[str, str | None]:
        return {"lo": self.lo, "hi": self.hi}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ShardRange:
        return cls(str(data["lo"]), None if data.get("hi") is None else str(data["hi"]))


class ShardMap:
    """A partition of the whole key space by sorted lower bounds, the first one ""."""

    def __init__(self, labels: Iterable[str] = ()) -> None:
        self.labels = sorted({"", *labels})

    def ranges(self) -> list[ShardRange]:
        ends: list[str | None] = [*self.labels[1:], None]
        return [ShardRange(lo, hi) for lo, hi in zip(self.labels, ends, strict=True)]

    def label_of(self, key: str) -> str:
        return self.labels[bisect_right(self.labels, key) - 1]

    def overlapping(self, lo: str, hi: str | None) -> list[ShardRange]:
        """The shards holding keys of [lo, hi)."""
        return [
            r for r in self.ranges() if (hi is None or r.lo < hi) and (r.hi is None or lo < r.hi)
        ]

    def __len__(self) -> int:
        return len(self.labels)


def load_map(store: VectorStore, collection: str) -> ShardMap:
    """The shard map of a collection, from the labels its points carry."""
    return ShardMap(store.shard_labels(collection))


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """The keys under a folder (or any key prefix): [prefix, prefix with its last character
    incremented). The root ("") is the whole key space."""
    if not prefix:
        return "", None
    last = prefix[-1]
    if last == _MAX_CHAR:
        return prefix, None  # no key can follow; never a real path character
    return prefix, prefix[:-1] + chr(ord(last) + 1)


def split_bounds(keys: Iterator[str], size: int) -> Iterator[str]:
    """The lower bound of each part after the first when keys (in order) are cut every
    `size` keys: the keys at positions size, 2*size, ..."""
    for n, key in enumerate(keys):
        if n and n % size == 0:
            yield key
