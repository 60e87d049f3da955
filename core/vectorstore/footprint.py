"""What a collection costs in RAM and on disk, part by part and by memory tier: the capacity
model of docs/capacity-plan.md and of a reindex's pre-flight check (indexer/jobs/preflight.py).

    python -m core.vectorstore.footprint [--points 1e8] [--dim 512] [--nodes 3]

Each part has the tier the collection's schema gives it (core/vectorstore/schema.py). RAM counts
a *pinned* part whole (it is on the heap) and a *cached* one whole (the engine reads it in at
start); a *cold* part's pages that the recall benchmark's searches left resident
(loadtests/bench_recall_filtered.py) are said apart, as page cache, which memory pressure
evicts. What every search walks, the quantized copies and the graph, counts whole whatever its
tier: a cold tier is no way to move search onto the disk.

Every per-point figure says where it comes from: *exact* (the format's size), *measured* (on
Qdrant Edge at 512 dims, the indexer's payload: loadtests/bench_footprint.py, the slope from
1e5 to 1e6 photos, so that what a collection holds whatever its size drops out), or *assumed*.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from core.settings import QdrantSettings
from core.vectorstore.schema import (
    PAYLOAD_INDEXES,
    CollectionSchema,
    FieldIndex,
    Tier,
    schema_of,
    subgraph_fields,
)

GiB = 1 << 30
MiB = 1 << 20

# The keys of the benchmark (loadtests/vocabulary.py: "000/IMG_0000000.jpg"), and what a
# catalogue's are assumed to be: a photo's id is its key under the source's root, such as
# "2024/06/12/8f3a9c2e-IMG_4711.jpg". Three near-unique keyword indexes hold a key each
# (photo_id, source_key, and dup_group, which names a photo), and so does the payload, four
# times (photo_id, source_key, source_uri, dup_group).
BENCH_KEY_CHARS = 19
KEY_CHARS = 40  # assumed
NEAR_UNIQUE_FIELDS = ("photo_id", "source_key", "dup_group")
# Assumed: a keyword index keeps a key twice (point -> value, value -> points).
INDEX_BYTES_PER_KEY_CHAR = 2
PAYLOAD_BYTES_PER_KEY_CHAR = 4

# Measured on disk, bytes a photo (python -m loadtests.bench_footprint --points
# 100000,1000000 --threshold-kb 100, 2026-11-29, shipped layout: the slope from 1e5 to 1e6
# photos of 512 dims, one cluster of photos per 100).
GRAPH = 73.2  # the main HNSW graph, m=16 (compressed links: 57 B a photo at 1e5, 72 at 1e6)
# A field's payload subgraph, by its degree (payload_m): the graph's bytes with created_at's
# subgraph less without it, 1e6 photos of the flat clusters GRAPH was measured on (python -m
# loadtests.bench_graph_recall --data flat --subgraph-m 4|6, 2026-11-29): 33.3 B a photo at
# 4, 49.8 at 6; this line passes through both. On nested clusters it is less (26.7 at 4, 40.6
# at 6, 54.3 at 8, 93.2 at 16). Its links join photos near in time, anywhere in the vector
# space: they compress less than the main graph's.
SUBGRAPH_BASE = 0.3
SUBGRAPH_PER_M = 8.25
TURBO4_EXTRA = 8.0  # a 4-bit copy is dim / 2 bytes and this
INDEXES: dict[str, float] = {
    "photo_id": 75.6,
    "source_key": 75.6,
    "dup_group": 75.6,
    "shard": 43.2,
    "tags": 95.6,
    "terms": 123.9,
    "photographer": 34.9,
    "license": 32.6,
    "created_at": 40.3,
    "model_version": 28.2,
    "auto_tags": 50.7,
    "colors": 46.4,
    "orientation": 32.6,
    "width": 40.3,
    "height": 40.3,
    "copy_space": 28.2,
    "popularity": 40.3,
    "color_shares": 253.3,  # the 12 float indexes of color_shares.<palette name> together
}
KEYWORDS_INDEX = 59.4  # the inverted index of the title's, tags' and automatic tags' words
KEYWORDS_VECTORS = 168.5  # the sparse vectors themselves (on disk only)
ID_TRACKER = 44.1  # a point's UUID, its offset and version (the cold format)
PAYLOAD = 770.6
WAL_BYTES = 37 * MiB  # per shard, whatever its size

# Measured: the share of a cold part resident after the recall benchmark's searches
# (python -m loadtests.bench_recall_filtered --queries 200 --ef 128,256,512 --oversampling 3
# on the 1e6 collection above, 2026-11-29: 200 text queries at each of its 6 settings,
# unfiltered and under created_at windows of 1%, 5% and 20%; the exact searches that give the
# truth run in a process of their own). A payload index's share is its own; one the
# benchmark's filters do not read is taken at the largest share such an index had (their few
# MiB of mapped headers, whatever their size). The benchmark runs no keyword search: the
# keywords' index takes its share from bench_footprint's search probe (300 keyword searches).
RESIDENT: dict[str, float] = {
    "original vectors": 0.2057,
    "keywords index": 0.74,
    "id tracker": 0.9955,
    "payload": 0.1088,
}
RESIDENT_INDEXES: dict[str, float] = {"created_at": 0.6739}
RESIDENT_OTHER_INDEX = 0.1615
# A cached part is read in whole at start, and stays unless memory runs short: counted whole.
CACHED_RESIDENT = 1.0
# A pinned structure's heap per byte on disk: the payload indexes and id tracker of the release
# before the tiers, all on the heap (bench_footprint, 2026-11-27); arrays (quantized copies,
# the graph) take their size.
HEAP_PER_DISK_BYTE = 1.35
# A server's optimizer rebuilds a few segments at a time, not the whole collection as Qdrant
# Edge's optimize() does (its room check in core/vectorstore/edge.py): assumed a quarter (two
# optimizer threads, ~8 segments a shard), not measured here.
SERVER_BUILD_HEADROOM = 0.25
# The Qdrant cluster of infra/qdrant/values.yaml: replicaCount, each node's memory limit and
# its disk; the plan's rule keeps 48 of a node's 64 GiB for the collections (the rest: the
# engine, the optimizer's working memory and the page cache beyond what is counted) and
# at most 75% of its disk in use.
NODES = 3
NODE_MEMORY_GIB = 64
NODE_MEMORY_BUDGET_GIB = 48
NODE_DISK_GIB = 1024
NODE_DISK_SHARE = 0.75


@dataclass(frozen=True)
class Layout:
    """How a collection is stored: its schema, and how a server places it."""

    schema: CollectionSchema = field(default_factory=CollectionSchema)
    indexes: Mapping[str, FieldIndex] = field(default_factory=lambda: PAYLOAD_INDEXES)
    shards: int = 1  # each holds a WAL
    copies: int = 1  # replication factor: a server's cluster holds every part this many times
    # Disk the index build writes beside the collection before it drops the old segments, as
    # a share of the collection: Edge's optimize() rewrites all of it at once.
    build_headroom: float = 1.0


@dataclass(frozen=True)
class Part:
    """One part of a collection: its tier (None: on disk only), the RAM the plan's rule counts
    (pinned and cached parts), its bytes on disk, where its figure comes from, and the pages of
    a cold part that searches left resident (page cache: evictable, not counted as RAM)."""

    name: str
    tier: Tier | None
    memory_bytes: float
    disk_bytes: float
    source: str
    cache_bytes: float = 0.0


@dataclass(frozen=True)
class Footprint:
    """A collection's parts, their sums, and the collection's points."""

    points: int
    parts: tuple[Part, ...]

    @property
    def memory_bytes(self) -> float:
        return sum(p.memory_bytes for p in self.parts)

    @property
    def disk_bytes(self) -> float:
        return sum(p.disk_bytes for p in self.parts)

    @property
    def cache_bytes(self) -> float:
        return sum(p.cache_bytes for p in self.parts)

    def memory_of(self, tier: Tier) -> float:
        """The RAM counted for the parts of one tier (a cold part's: its page cache)."""
        return sum(
            p.cache_bytes if tier == Tier.COLD else p.memory_bytes
            for p in self.parts
            if p.tier == tier
        )


def quantized_bytes(dim: int, schema: CollectionSchema) -> float:
    """One quantized copy: 4 bits a dimension and a few bytes (turbo4), or a byte a dimension
    and its 4-byte offset (int8)."""
    if schema.quantizer == "turbo4":
        return dim / 2 + TURBO4_EXTRA
    if schema.quantizer == "int8":
        return dim + 4
    return 0.0


def graph_bytes(schema: CollectionSchema, indexes: Mapping[str, FieldIndex]) -> float:
    """The main graph's links at m, and a subgraph per field that asks for one at payload_m
    (each photo is in one block of the field's values)."""
    main = GRAPH * schema.hnsw_m / 16
    subgraphs = len(subgraph_fields(indexes)) if schema.subgraph_m else 0
    return main + subgraphs * (SUBGRAPH_BASE + SUBGRAPH_PER_M * schema.subgraph_m)


def index_bytes(indexes: Mapping[str, FieldIndex], key_chars: int) -> dict[str, float]:
    """Each payload index's bytes on disk a photo (the measured, the largest for a field the
    benchmark did not have)."""
    sizes: dict[str, float] = {}
    shares = [f for f in indexes if f.startswith("color_shares.")]
    for name in indexes:
        if name in shares:
            size = INDEXES["color_shares"] / len(shares)
        else:
            size = INDEXES.get(name, max(INDEXES.values()))
        if name in NEAR_UNIQUE_FIELDS:
            size += INDEX_BYTES_PER_KEY_CHAR * (key_chars - BENCH_KEY_CHARS)
        sizes[name] = size
    return sizes


def held(tier: Tier, disk: float, resident: float, *, structure: bool) -> tuple[float, float]:
    """(RAM counted, page cache) of a part of `disk` bytes by its tier: a pinned part whole (a
    structure at its heap's size), a cached one whole (read in at start), a cold one in the
    page cache at its resident share."""
    if tier == Tier.PINNED:
        return disk * (HEAP_PER_DISK_BYTE if structure else 1.0), 0.0
    if tier == Tier.CACHED:
        return disk * CACHED_RESIDENT, 0.0
    return 0.0, disk * resident


def index_parts(
    indexes: Mapping[str, FieldIndex], key_chars: int
) -> dict[Tier, tuple[float, float, float]]:
    """The payload indexes by tier: (bytes on disk, RAM counted, page cache) a photo."""
    by_tier: dict[Tier, tuple[float, float, float]] = {}
    for name, size in index_bytes(indexes, key_chars).items():
        tier = indexes[name].tier
        share = RESIDENT_INDEXES.get(name.partition(".")[0], RESIDENT_OTHER_INDEX)
        memory, cache = held(tier, size, share, structure=True)
        disk, m, c = by_tier.get(tier, (0.0, 0.0, 0.0))
        by_tier[tier] = (disk + size, m + memory, c + cache)
    return by_tier


def footprint(points: int, dim: int, layout: Layout, *, key_chars: int = KEY_CHARS) -> Footprint:
    """A collection of `points` photos of `dim` dimensions: layout.copies copies of it."""
    s, stored = layout.schema, points * layout.copies
    extra_key = key_chars - BENCH_KEY_CHARS
    width = 2 if s.datatype == "float16" else 4
    subgraphs = len(subgraph_fields(layout.indexes))
    # (name, tier or None for disk only, bytes a photo on disk, resident share when cold, a
    # structure on the heap when pinned, source)
    rows: list[tuple[str, Tier | None, float, float, bool, str]] = [
        (f"original vectors ({s.datatype})", s.originals, width * dim,
         RESIDENT["original vectors"], False, "exact"),
        (f"quantized copies ({s.quantizer})", s.quantized, quantized_bytes(dim, s), 1.0, False,
         "measured"),
        (f"HNSW graph (m={s.hnsw_m}, {subgraphs} payload subgraphs)", s.graph,
         graph_bytes(s, layout.indexes), 1.0, False, "measured"),
        ("keywords: inverted index (IDF)", s.keywords_index, KEYWORDS_INDEX,
         RESIDENT["keywords index"], True, "measured"),
        ("keywords: sparse vectors", None, KEYWORDS_VECTORS, 0.0, False, "measured"),
        ("id tracker", s.id_tracker, ID_TRACKER, RESIDENT["id tracker"], True, "measured"),
        ("payload", s.payload, PAYLOAD + PAYLOAD_BYTES_PER_KEY_CHAR * extra_key,
         RESIDENT["payload"], False, f"measured, {key_chars}-char keys"),
    ]  # fmt: skip
    walked = {rows[1][0], rows[2][0]}  # the quantized copies and the graph
    parts = []
    for name, tier, n, share, structure, source in rows:
        memory, cache = (0.0, 0.0) if tier is None else held(tier, n, share, structure=structure)
        if name in walked:
            memory, cache = n, 0.0
        parts.append(Part(name, tier, memory * stored, n * stored, source, cache * stored))
    for tier, (disk, memory, cache) in sorted(index_parts(layout.indexes, key_chars).items()):
        parts.append(
            Part(
                f"payload indexes ({tier})",
                tier,
                memory * stored,
                disk * stored,
                f"measured, {key_chars}-char keys",
                cache * stored,
            )
        )
    parts.append(Part("WAL", None, 0, WAL_BYTES * layout.shards * layout.copies, "measured"))
    return Footprint(points, tuple(parts))


def during_build(collection: Footprint, layout: Layout) -> Footprint:
    """The collection while its index is built: the segments rewritten beside it on disk."""
    rewritten = collection.disk_bytes * layout.build_headroom
    headroom = Part("index build (segments rewritten)", None, 0, rewritten, "Layout.build_headroom")
    return replace(collection, parts=(*collection.parts, headroom))


def layout_of(settings: QdrantSettings) -> Layout:
    """How the store's collections are laid out, by the settings that create them."""
    if settings.url is None:  # Qdrant Edge (core/vectorstore/edge_shard.py): one shard, one copy
        return Layout(schema=schema_of(settings))
    return Layout(
        schema=schema_of(settings),
        shards=settings.shards,
        copies=settings.replicas,
        build_headroom=SERVER_BUILD_HEADROOM,
    )


def _gib(n: float) -> str:
    return f"{n / GiB:,.1f}"


def parts_table(f: Footprint) -> str:
    """A Markdown table of a footprint's parts, in GiB, with each part's tier."""
    lines = [
        "| part | tier | RAM counted (GiB) | page cache, cold (GiB) | disk (GiB) | per photo |",
        "|---|---|---:|---:|---:|---|",
    ]
    for p in f.parts:
        tier = "disk only" if p.tier is None else str(p.tier)
        lines.append(
            f"| {p.name} | {tier} | {_gib(p.memory_bytes)} | {_gib(p.cache_bytes)} | "
            f"{_gib(p.disk_bytes)} | {p.source} |"
        )
    lines.append(
        f"| **all** | | **{_gib(f.memory_bytes)}** | {_gib(f.cache_bytes)} | "
        f"**{_gib(f.disk_bytes)}** | |"
    )
    return "\n".join(lines)


def reindex_table(points: int, dim: int, settings: QdrantSettings, nodes: int) -> str:
    """Markdown: a reindex of `points` photos beside a live collection as large, on a store
    laid out by `settings`, by tier, in all and per node, against the plan's rule."""
    layout = layout_of(settings)
    live = footprint(points, dim, layout)
    new = during_build(footprint(points, dim, layout), layout)
    both = replace(live, parts=live.parts + new.parts)

    def row(name: str, f: Footprint, share: float) -> str:
        cells = [
            f.memory_of(Tier.PINNED),
            f.memory_of(Tier.CACHED),
            f.memory_bytes,
            f.cache_bytes,
            f.disk_bytes,
        ]
        return f"| {name} | " + " | ".join(_gib(c * share) for c in cells) + " |"

    build = Part("index build", None, 0, new.disk_bytes - live.disk_bytes, "")
    lines = [
        "| | pinned (GiB) | cached (GiB) | RAM counted (GiB) | page cache, cold (GiB) | "
        "disk (GiB) |",
        "|---|---:|---:|---:|---:|---:|",
        row("the live collection", live, 1),
        row("the new collection", live, 1),
        row("its index build (segments rewritten beside it)", Footprint(points, (build,)), 1),
        row("**during the reindex, in all**", both, 1),
        row(f"**per node, of {nodes}**", both, 1 / nodes),
    ]
    memory, disk = both.memory_bytes / nodes, both.disk_bytes / nodes
    disk_limit = NODE_DISK_SHARE * NODE_DISK_GIB * GiB
    ram_ok = memory <= NODE_MEMORY_BUDGET_GIB * GiB
    lines += [
        "",
        f"Per node: **{_gib(memory)} GiB of RAM counted** against the rule's "
        f"{NODE_MEMORY_BUDGET_GIB} GiB of a {NODE_MEMORY_GIB} GiB node "
        f"({'fits' if ram_ok else 'does not fit'}); **{_gib(disk)} GiB of disk** against "
        f"{NODE_DISK_SHARE:.0%} of {NODE_DISK_GIB:,} GiB = {_gib(disk_limit)} GiB "
        f"({'fits' if disk <= disk_limit else 'does not fit'}). The cold parts' pages that the "
        f"recall benchmark's searches left resident would take {_gib(both.cache_bytes / nodes)}"
        f" GiB of page cache a node at that share; the page cache has what the node's "
        f"{NODE_MEMORY_GIB} GiB leave beside the counted RAM and the engine, and evicts the rest.",
    ]
    return "\n".join(lines)


def capacity_section(points: int, dim: int, nodes: int) -> str:
    """What docs/capacity-plan.md shows between its markers: one collection's parts, then the
    reindex, on the settings' defaults for a server (replicas, shards, tiers, quantization)."""
    settings = QdrantSettings(url="http://qdrant:6333")
    collection = footprint(points, dim, layout_of(settings))
    return (
        f"One collection of {points:,.0f} photos of {dim} dimensions, {settings.replicas} "
        f"copies of each of {settings.shards} shards, m={settings.hnsw_m}, {KEY_CHARS}-character "
        f"keys:\n\n{parts_table(collection)}\n\n"
        f"A reindex beside the live collection, on {nodes} nodes:\n\n"
        f"{reindex_table(points, dim, settings, nodes)}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=float, default=1e8)
    parser.add_argument("--dim", type=int, default=512, help="ViT-B-32's")
    parser.add_argument("--nodes", type=int, default=NODES, help="Qdrant nodes")
    args = parser.parse_args(argv)
    print(capacity_section(int(args.points), args.dim, args.nodes))


if __name__ == "__main__":
    main()
