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

A payload subgraph (extra HNSW links among the photos of each block of a field's values,
Qdrant's `payload_m`) is built only for a field that says so (FieldIndex.subgraph): `created_at`
alone. Its links join photos that are near in time but anywhere in the vector space, so besides
letting a date filter walk the graph they give the graph the long links a catalogue of many
unrelated subjects lacks: at 1e6 (loadtests/bench_graph_recall.py), at payload_m 6, they took
unfiltered recall at hnsw_ef 256 from 0.67 to 0.97, and date filters of 1-20% from 0.18-0.89
with ACORN to 0.98-0.99 without it, at a p95 of 5 ms against 45. The default degree, 4, is
what the 1e8 budget has room for (footprint.py); at hnsw_ef 768 it keeps every goal.
Other filters walk the main graph with ACORN (SearchTuning.acorn; filters.walking), which a
filter on subgraph fields alone does without: there it only costs time.
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


# The fields whose filters need a payload subgraph (at most 3: each costs ~33 B a photo
# pinned at payload_m 4, footprint.SUBGRAPH_BASE and SUBGRAPH_PER_M). created_at: a date
# window is the filter that narrows a search most (a month is 0.4% of the catalogue), and its
# subgraph also links the main graph's unrelated subjects (the module's docstring).
SUBGRAPHS = frozenset({"created_at"})


def _index(field: str, kind: FieldKind) -> FieldIndex:
    """A field's index: cold, with a subgraph only if SUBGRAPHS names it (a field added later
    too, by its kind's list in base.py). One that needs another tier is given it here, with
    why."""
    if kind == "integer":
        lookup, ranged = _INTEGER_HALVES[field]
        return FieldIndex(kind, lookup=lookup, range=ranged, subgraph=field in SUBGRAPHS)
    return FieldIndex(kind, subgraph=field in SUBGRAPHS)


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
if not SUBGRAPHS <= PAYLOAD_INDEXES.keys() or len(SUBGRAPHS) > 3:
    raise RuntimeError(f"subgraphs for at most 3 indexed fields: {sorted(SUBGRAPHS)}")


@dataclass(frozen=True)
class CollectionSchema:
    """How a new collection is made, whatever its dimension: the settings' choices and the
    tiers of the module's rule."""

    hnsw_m: int = 16
    hnsw_ef_construct: int = 128
    # The payload subgraphs' degree (Qdrant's payload_m), where a field has one.
    subgraph_m: int = 4
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
        """The subgraphs' degree where a field has one, else 0 (none built)."""
        return self.subgraph_m if subgraph_fields(indexes) else 0


def subgraph_fields(indexes: Mapping[str, FieldIndex]) -> tuple[str, ...]:
    """The fields the graph builds a payload subgraph for."""
    return tuple(field for field, index in indexes.items() if index.subgraph)


def schema_of(settings: QdrantSettings) -> CollectionSchema:
    """The schema the settings create collections with."""
    return CollectionSchema(
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construct=settings.hnsw_ef_construct,
        subgraph_m=settings.subgraph_m,
        full_scan_threshold_kb=settings.full_scan_threshold_kb,
        quantizer=settings.quantizer if settings.quantization else None,
        datatype=settings.vector_datatype,
        # Originals kept in RAM are the page cache's, read in whole at start: they cannot be
        # pinned (Qdrant keeps dense vectors mapped).
        originals=Tier.COLD if settings.on_disk else Tier.CACHED,
    )
