"""What a collection costs in memory and on disk, part by part: the capacity model of
docs/capacity-plan.md and of a reindex's pre-flight check (indexer/preflight.py).

    python -m core.vectorstore.footprint [--points 1e8] [--dim 512] [--nodes 3]

Every per-point figure below says where it comes from: *exact* (the format's size), *measured*
(loadtests/bench_footprint.py on Qdrant Edge at 512 dims: the slope between two sizes, so that
what a collection holds whatever its size drops out), or *assumed*. Memory counts what the
engine holds in RAM by the collection's config (core/vectorstore/edge_shard.py, qdrant.py): the
int8 copies (`always_ram`), the HNSW graph, the payload indexes, the keywords' inverted index
and the id tracker, at their measured size in the engine's heap. The original vectors and the
payload stay on disk and are read through the page cache (the originals only to rescore the
best candidates): they count on disk only, unless the originals are kept in RAM or are what the
search walks (no int8 copies).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from core.settings import QdrantSettings

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

# Measured (loadtests/bench_footprint.py, 2026-11-27: bytes per point on disk, the slope from
# 2e4 to 1e5 points of 512 dims, the indexer's payload, keys of BENCH_KEY_CHARS).
NEAR_UNIQUE_INDEX = 75.7  # each of NEAR_UNIQUE_FIELDS
# shard 43.3, tags 95.5, photographer 34.9, license 32.6, created_at 40.2, model_version 68.2
OTHER_INDEXES = 314.7
# The indexes of search's features (issue 35): terms 124, auto_tags 50.6, colors 46.6,
# orientation 32.6, width 68.2, height 68.2, copy_space 68.2, the 12 of color_shares 255
# together, popularity 40.2.
FEATURE_INDEXES = 753.6
KEYWORDS_INDEX = 59.4  # the inverted index of the title, tags, photographer's and auto tags' words
KEYWORDS_VECTORS = 168.0  # the sparse vectors themselves
ID_TRACKER = 29.1  # a point's UUID, its offset and version
PAYLOAD = 771.0
WAL_BYTES = 37 * MiB  # per shard, whatever its size: the larger of 2e4's (37) and 1e5's (33.6)
# The payload indexes, the keywords' index and the id tracker are loaded into the engine's
# heap, where they take this many times their bytes on disk: a fresh process's anonymous
# memory after serving searches, less the int8 copies, per point, over their bytes on disk.
# (The int8 copies are an array loaded whole; the graph's file is mapped, all its pages
# resident: both count once.)
HEAP_PER_DISK_BYTE = 1.35

# Assumed: a keyword index keeps a key twice (point -> value, value -> points: its two files
# were each about the key's length plus a fixed part).
INDEX_BYTES_PER_KEY_CHAR = 2
PAYLOAD_BYTES_PER_KEY_CHAR = 4
# Qdrant adds HNSW links for every payload index block of full_scan_threshold (5,000 points of
# 512 dims) to ~N/7 points that the main graph leaves poorly connected: the photos of a tag,
# of a shard label, of a created_at range, of a colour's share or an orientation. The graph
# file took 54 B a point at 2e4 (no block that large) and 680 B at 1e5: at ~log2(n) bits a
# compressed link (54 B x log2(1e5) / log2(2e4) = 63 B for the main graph at 1e5), ~10.8
# times the main graph's links at 1e5, so 10 subgraphs a point (6 before issue 35's
# indexes). Taken at 1e8 too (assumed: it depends on how many of a photo's values form such
# blocks in its segment); 4 bytes a link, the uncompressed size, bounds the compression.
SUBGRAPHS = 10
LINK_BYTES = 4
# A server's optimizer rebuilds a few segments at a time, not the whole collection as Qdrant
# Edge's optimize() does (its room check in core/vectorstore/edge.py): assumed a quarter (two
# optimizer threads, ~8 segments a shard), not measured here.
SERVER_BUILD_HEADROOM = 0.25
# The Qdrant cluster of infra/qdrant/values.yaml (replicaCount).
NODES = 3


@dataclass(frozen=True)
class Layout:
    """How a collection is stored: what the store's collection config says."""

    m: int = 16  # HNSW degree (QdrantSettings.hnsw_m)
    quantization: bool = True  # int8 copies, kept in RAM (QdrantSettings.quantization)
    originals_in_ram: bool = False  # a server's on_disk=False; Edge keeps them in the page cache
    shards: int = 1  # each holds a WAL
    copies: int = 1  # replication factor: a server's cluster holds every part this many times
    # Disk the index build writes beside the collection before it drops the old segments, as
    # a share of the collection: Edge's optimize() rewrites all of it at once.
    build_headroom: float = 1.0


@dataclass(frozen=True)
class Part:
    """One part of a collection: bytes in RAM and on disk, and where its figure comes from."""

    name: str
    memory_bytes: float
    disk_bytes: float
    source: str


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


def graph_bytes_per_point(m: int) -> float:
    """HNSW links of one point: up to 2m at level 0 and m at each level above, which a point
    reaches with probability 1/m each (m/(m-1) more links on average), in the main graph and
    in each payload subgraph it is in (SUBGRAPHS), LINK_BYTES each."""
    return (2 * m + m / (m - 1)) * (1 + SUBGRAPHS) * LINK_BYTES


def footprint(points: int, dim: int, layout: Layout, *, key_chars: int = KEY_CHARS) -> Footprint:
    """A collection of `points` photos of `dim` dimensions: layout.copies copies of it."""
    extra_key = key_chars - BENCH_KEY_CHARS
    near_unique = NEAR_UNIQUE_INDEX + INDEX_BYTES_PER_KEY_CHAR * extra_key
    keys = f"{key_chars}-char keys"
    heap = HEAP_PER_DISK_BYTE
    # Each part: its name, its bytes a point on disk, its bytes in RAM per byte on disk (0: on
    # disk only), and where its figure comes from.
    originals = 1.0 if layout.originals_in_ram or not layout.quantization else 0.0
    graph = f"m={layout.m}, {SUBGRAPHS} subgraphs"
    per_point = [
        ("original vectors (float32)", 4 * dim, originals, "exact"),
        ("int8 copies", dim + 4 if layout.quantization else 0, 1.0, "exact (+ 4 B offset)"),
        ("HNSW graph", graph_bytes_per_point(layout.m), 1.0, graph),
        ("payload indexes: photo_id, source_key, dup_group", 3 * near_unique, heap, keys),
        ("payload indexes: the 6 others", OTHER_INDEXES, heap, "measured"),
        ("payload indexes: search features (9 fields)", FEATURE_INDEXES, heap, "measured"),
        ("keywords: inverted index (IDF)", KEYWORDS_INDEX, heap, "measured"),
        ("keywords: sparse vectors", KEYWORDS_VECTORS, 0.0, "measured"),
        ("id tracker", ID_TRACKER, heap, "measured"),
        ("payload", PAYLOAD + PAYLOAD_BYTES_PER_KEY_CHAR * extra_key, 0.0, keys),
    ]
    stored = points * layout.copies
    parts = [
        Part(name, n * stored * in_ram, n * stored, source) for name, n, in_ram, source in per_point
    ]
    parts.append(Part("WAL", 0, WAL_BYTES * layout.shards * layout.copies, "measured, a shard"))
    return Footprint(points, tuple(parts))


def during_build(collection: Footprint, layout: Layout) -> Footprint:
    """The collection while its index is built: the segments rewritten beside it on disk."""
    rewritten = collection.disk_bytes * layout.build_headroom
    headroom = Part("index build (segments rewritten)", 0, rewritten, "see Layout.build_headroom")
    return replace(collection, parts=(*collection.parts, headroom))


def layout_of(settings: QdrantSettings) -> Layout:
    """How the store's collections are laid out, by the settings that create them."""
    if settings.url is None:  # Qdrant Edge (core/vectorstore/edge_shard.py): one shard, one copy
        return Layout(m=settings.hnsw_m, quantization=settings.quantization)
    return Layout(
        m=settings.hnsw_m,
        quantization=settings.quantization,
        originals_in_ram=not settings.on_disk,
        shards=settings.shards,
        copies=settings.replicas,
        build_headroom=SERVER_BUILD_HEADROOM,
    )


def _gib(n: float) -> str:
    return f"{n / GiB:,.0f}"


def parts_table(f: Footprint) -> str:
    """A Markdown table of a footprint's parts, in GiB."""
    lines = ["| part | memory (GiB) | disk (GiB) | per point from |", "|---|---|---|---|"]
    for p in f.parts:
        lines.append(f"| {p.name} | {_gib(p.memory_bytes)} | {_gib(p.disk_bytes)} | {p.source} |")
    lines.append(f"| **all** | **{_gib(f.memory_bytes)}** | **{_gib(f.disk_bytes)}** | |")
    return "\n".join(lines)


def reindex_table(points: int, dim: int, settings: QdrantSettings, nodes: int) -> str:
    """Markdown: a reindex of `points` photos beside a live collection as large, on a store
    laid out by `settings`, in all and per node."""
    layout = layout_of(settings)
    live = footprint(points, dim, layout)
    new = during_build(footprint(points, dim, layout), layout)
    build = new.disk_bytes - live.disk_bytes
    memory, disk = live.memory_bytes + new.memory_bytes, live.disk_bytes + new.disk_bytes
    rows = [
        ("the live collection", live.memory_bytes, live.disk_bytes),
        ("the new collection", live.memory_bytes, live.disk_bytes),
        ("its index build (segments rewritten beside it)", 0.0, build),
        ("**during the reindex, in all**", memory, disk),
        (f"**per node, of {nodes}**", memory / nodes, disk / nodes),
    ]
    lines = ["| | memory (GiB) | disk (GiB) |", "|---|---|---|"]
    lines += [f"| {name} | {_gib(m)} | {_gib(d)} |" for name, m, d in rows]
    return "\n".join(lines)


def capacity_section(points: int, dim: int, nodes: int) -> str:
    """What docs/capacity-plan.md shows between its markers: one collection's parts, then the
    reindex, on the settings' defaults for a server (replicas, shards, int8, on-disk vectors)."""
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
