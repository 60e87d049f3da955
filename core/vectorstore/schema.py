"""The collection's schema, once for both engines: each part's memory tier, the quantized
copies, the graph, and each payload index's kind, tier and payload subgraph.

Qdrant Edge (edge_shard.py) and a Qdrant server (qdrant.py) each translate this into their own
classes; the capacity model (footprint.py) counts the same tiers. The rule, for 1e8 photos with
a reindex beside the live collection on 3 nodes of 64 GiB (docs/capacity-plan.md):

- *pinned* (on the heap, never evicted): what every search walks, the quantized copies and the
  HNSW graph;
- *cold* (mapped, read on first use, evictable): what a search reads a few pages of, the
  original vectors (rescoring reads ~limit x oversampling of them), the payload (the hits'),
  the id tracker (the hits' ids), the keywords' inverted index (the query's words' postings),
  and every payload index: a filter reads the postings of its values and the values of the
  points the graph visits;
- *cached* (mapped and read in whole at start): nothing by default. At 1e8 a part read in
  whole costs its whole size, which the budget has only for what is pinned.

A payload subgraph (extra HNSW links per value of a field, Qdrant's `payload_m`) is built only
for a field that says so (FieldIndex.subgraph). None does yet: one costs about as much as the
main graph, which the 1e8 budget has no room for, and filtered searches walk the main graph
with ACORN (SearchTuning.acorn). At 1e6 that leaves narrow filters short of the recall asked
(loadtests/bench_recall_filtered.py; loadtests/README.md has the figures).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from core.settings import QdrantSettings, Quantizer, VectorDatatype
from core.vectorstore.base import (
    DATETIME_FIELDS,
    FLOAT_FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
)

# The payload indexes' kinds, as both engines name them.
FieldKind = Literal["keyword", "datetime", "integer", "float"]


class Tier(StrEnum):
    """Where a part lives (Qdrant's `memory`): see the module's docstring."""

    PINNED = "pinned"
    CACHED = "cached"
    COLD = "cold"


@dataclass(frozen=True)
class FieldIndex:
    """One payload index: its kind, tier, whether the graph builds a payload subgraph for it,
    and for an integer which of its halves are built (exact values, ranges)."""

    kind: FieldKind
    tier: Tier = Tier.COLD
    subgraph: bool = False
    lookup: bool = True
    range: bool = True


# The integer fields' halves, by the filters that read them (core/vectorstore/filters.py):
# sizes are minimums (ranges), the copy-space flag and the model version exact values.
_INTEGER_HALVES: dict[str, tuple[bool, bool]] = {
    "model_version": (True, False),
    "width": (False, True),
    "height": (False, True),
    "copy_space": (True, False),
}
if set(_INTEGER_HALVES) != set(INTEGER_FIELDS):
    raise RuntimeError(f"say which halves each integer index builds: {INTEGER_FIELDS}")


def _index(field: str, kind: FieldKind) -> FieldIndex:
    """A field's index: cold, without a subgraph (a field added later too, by its kind's list
    in base.py). One that needs another tier or a subgraph is given it here, with why."""
    if kind == "integer":
        lookup, ranged = _INTEGER_HALVES[field]
        return FieldIndex(kind, lookup=lookup, range=ranged)
    return FieldIndex(kind)


_KINDS: tuple[tuple[tuple[str, ...], FieldKind], ...] = (
    (KEYWORD_FIELDS, "keyword"),
    (DATETIME_FIELDS, "datetime"),
    (INTEGER_FIELDS, "integer"),
    (FLOAT_FIELDS, "float"),
)
# Every payload index a collection has, by field.
PAYLOAD_INDEXES: dict[str, FieldIndex] = {
    field: _index(field, kind) for fields, kind in _KINDS for field in fields
}


@dataclass(frozen=True)
class CollectionSchema:
    """How a new collection is made, whatever its dimension: the settings' choices and the
    tiers of the module's rule."""

    hnsw_m: int = 16
    hnsw_ef_construct: int = 128
    full_scan_threshold_kb: int = 10_000
    quantizer: Quantizer | None = "turbo4"
    datatype: VectorDatatype = "float16"
    originals: Tier = Tier.COLD
    quantized: Tier = Tier.PINNED
    graph: Tier = Tier.PINNED
    keywords_index: Tier = Tier.COLD
    payload: Tier = Tier.COLD
    id_tracker: Tier = Tier.COLD
    # Segments above this many KB of vectors get their graph (None: the engine's default,
    # 10 MB): lowered only where a small collection must have one (tests).
    indexing_threshold_kb: int | None = None

    def payload_m(self, indexes: Mapping[str, FieldIndex]) -> int:
        """The subgraphs' degree: the graph's where a field has one, else 0 (none built)."""
        return self.hnsw_m if subgraph_fields(indexes) else 0


def subgraph_fields(indexes: Mapping[str, FieldIndex]) -> tuple[str, ...]:
    """The fields the graph builds a payload subgraph for."""
    return tuple(field for field, index in indexes.items() if index.subgraph)


def schema_of(settings: QdrantSettings) -> CollectionSchema:
    """The schema the settings create collections with."""
    return CollectionSchema(
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construct=settings.hnsw_ef_construct,
        full_scan_threshold_kb=settings.full_scan_threshold_kb,
        quantizer=settings.quantizer if settings.quantization else None,
        datatype=settings.vector_datatype,
        # Originals kept in RAM are the page cache's, read in whole at start: they cannot be
        # pinned (Qdrant keeps dense vectors mapped).
        originals=Tier.COLD if settings.on_disk else Tier.CACHED,
    )
