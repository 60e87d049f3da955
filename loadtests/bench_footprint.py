"""Measure what a collection costs on disk and in memory, part by part, on Qdrant Edge.

    python -m loadtests.bench_footprint [--points 20000,100000] [--dim 512]

For each size, a collection is built as the indexer builds one (core/vectorstore/edge.py: its
config, payload indexes and keywords vector; the payload the indexer writes, shards of
--shard-size photos, vectors in clusters as real embeddings are), its search index built, and:

- its folder is walked and each file's allocated bytes (not its apparent size: the engine
  preallocates sparse pages) are put under the part it belongs to: the original vectors, their
  quantized copies, the HNSW graph, each payload index, the keywords vector, the id tracker, the
  payload, and the rest (WAL, config);
- a fresh process opens the store and serves searches (dense, filtered by a tag and by colour
  and orientation, keyword, a facet), and
  psutil reads its resident memory before and after, split into anonymous memory (the engine's
  heap) and file-backed pages (mmap).

Per-point figures are the slope between two sizes, so that what a collection holds whatever its
size (preallocated pages, the WAL, the engine itself) drops out. The model in
core/vectorstore/footprint.py takes its measured constants from this output, and the last table
compares the model with the measurement. Prints Markdown; no thresholds are enforced.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil

from core.keywords import query_vector
from core.vectorstore import (
    KEY_FIELD,
    SHARD_FIELD,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    collection_name,
)
from core.vectorstore.edge import EdgeStore
from core.vectorstore.schema import CollectionSchema
from harness.previous import create_previous_collection
from harness.store import store_clusters
from harness.vocabulary import PALETTE, TAGS, photo_key, photo_payload
from loadtests.footprint_parts import INDEX_NAMES, disk_parts, part_of
from loadtests.registry import Figure
from loadtests.startup import heading

COLLECTION = collection_name(1, "footprint")
# Held in RAM as the engine's structures (besides each payload index, "index <field>").
HEAP_PARTS = ("keywords index", "id tracker")
SEED = 0
# A cluster of photos (a subject) per this many photos: a larger catalogue has more subjects,
# not larger ones. Text queries sit at about the same distance from every photo of their
# cluster, so a cluster larger than the search's beam (hnsw_ef 128) would measure the data,
# not the index: 100 is the API benchmark store's (1e5 photos in 1,000 clusters).
PHOTOS_PER_CLUSTER = 100


def clusters_for(points: int) -> int:
    return max(1000, points // PHOTOS_PER_CLUSTER)


UPSERT = 1000
SEARCHES = 300  # of each kind, in the memory probe


# The collections compared: the shipped schema (core/vectorstore/schema.py) and the previous
# release's (harness/previous.py).
LAYOUTS = ("shipped", "previous")


def store_at(path: Path, m: int, ef_construct: int, threshold_kb: int) -> EdgeStore:
    schema = CollectionSchema(
        hnsw_m=m, hnsw_ef_construct=ef_construct, full_scan_threshold_kb=threshold_kb
    )
    # A previous release's collection keeps its own config: the store opens it as it is.
    return EdgeStore(
        path, schema=schema, tuning=SearchTuning(hnsw_ef=128, oversampling=2.0), min_free_mb=0
    )


def build(
    path: Path,
    points: int,
    dim: int,
    m: int,
    ef_construct: int,
    shard: int,
    *,
    layout: str = "shipped",
    threshold_kb: int = 10_000,
) -> float:
    """The collection of `points` photos, indexed; returns the CPU seconds the index build
    took (this process's: the engine builds on its own threads)."""
    if layout == "previous":
        (path / "collections").mkdir(parents=True, exist_ok=True)
        create_previous_collection(path, COLLECTION, dim, m=m, ef_construct=ef_construct)
    store = store_at(path, m, ef_construct, threshold_kb)
    try:
        store.create_collection(COLLECTION, dim, bulk=True)
        rng = np.random.default_rng(SEED)
        r = random.Random(SEED)
        clusters = clusters_for(points)
        centres, spread = store_clusters(rng, dim, clusters)
        now = datetime.now(UTC).isoformat()
        for start in range(0, points, UPSERT):
            n = min(UPSERT, points - start)
            which = rng.integers(0, clusters, n)
            vectors = (
                centres[which]
                + rng.standard_normal((n, dim), dtype=np.float32) * spread[which, None]
            )
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            batch = []
            for j in range(n):
                photo_id, payload = photo_payload(r, start + j, 1, now)
                # What indexer/photo/writer.py adds: the shard's label, the key, the source's root.
                payload |= {
                    SHARD_FIELD: photo_key((start + j) // shard * shard),
                    KEY_FIELD: photo_id,
                    "source_root": "s3://photostock-originals",
                }
                batch.append(PhotoPoint(photo_id, vectors[j], payload))
            store.upsert(COLLECTION, batch)
        started = time.process_time()
        store.optimize(COLLECTION)
        return time.process_time() - started
    finally:
        store.close()


@dataclass(frozen=True)
class Resident:
    """Resident memory a fresh process gained by opening the store and serving searches: its
    anonymous memory (the engine's heap), and the pages of each part's files (mmap)."""

    heap: int
    files: dict[str, int]


def serve(path: str, dim: int, out: multiprocessing.Queue[Resident]) -> None:
    """In a fresh process: open the store, serve each kind of search, note resident memory."""
    rng = np.random.default_rng(SEED + 1)
    queries = rng.standard_normal((SEARCHES, dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    r = random.Random(SEED + 1)
    me = psutil.Process()
    before = me.memory_info()
    store = store_at(Path(path), 16, 128, 10_000)  # opens the collection with its own
    for query in queries:
        store.search(COLLECTION, query, limit=10)
        store.search(COLLECTION, query, limit=10, filter=SearchFilter(tags_any=(r.choice(TAGS),)))
        visual = SearchFilter(color=r.choice(PALETTE), color_min_share=0.1, orientation="portrait")
        store.search(COLLECTION, query, limit=10, filter=visual)
        store.keyword_search(COLLECTION, query_vector(r.choice(TAGS)), limit=10)
    store.shard_sizes(COLLECTION)
    after = me.memory_info()
    files: dict[str, int] = defaultdict(int)
    collections = Path(path) / "collections"
    for mapped in me.memory_maps(grouped=True):
        if Path(mapped.path).is_relative_to(collections):
            files[part_of(Path(mapped.path).relative_to(collections))] += mapped.rss
    store.close()
    heap = (after.rss - after.shared) - (before.rss - before.shared)
    out.put(Resident(heap, dict(files)))


def in_child(target: Callable[..., None], *args: object, timeout_s: float) -> object:
    """What target(*args, out) puts on `out`, run in a fresh process (one that has opened no
    store and mapped none of its pages)."""
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=target, args=(*args, out))
    child.start()
    found = out.get(timeout=timeout_s)
    child.join()
    return found


def resident(path: Path, dim: int) -> Resident:
    found = in_child(serve, str(path), dim, timeout_s=600)
    assert isinstance(found, Resident)
    return found


@dataclass(frozen=True)
class Size:
    points: int
    build_s: float
    disk: dict[str, int]
    memory: Resident


def measure(args: argparse.Namespace) -> list[Size]:
    sizes = []
    for points in args.points:
        with tempfile.TemporaryDirectory(prefix="footprint-", dir=args.dir) as folder:
            path = Path(folder) if args.keep is None else args.keep / f"{args.layout}-{points}"
            if args.keep is not None:
                shutil.rmtree(path, ignore_errors=True)
            print(f"  {points} points: building...", file=sys.stderr, flush=True)
            build_s = build(
                path,
                points,
                args.dim,
                args.m,
                args.ef_construct,
                args.shard_size,
                layout=args.layout,
                threshold_kb=args.threshold_kb,
            )
            disk = disk_parts(path / "collections")
            memory = resident(path, args.dim)
            sizes.append(Size(points, build_s, disk, memory))
    return sizes


def slope(low: float, high: float, sizes: Sequence[Size]) -> float:
    return (high - low) / (sizes[-1].points - sizes[0].points)


def report(sizes: Sequence[Size], args: argparse.Namespace) -> str:
    lines = [
        *heading(
            f"# Collection footprint on Qdrant Edge ({args.dim} dims, m={args.m}, "
            f"ef_construct={args.ef_construct}, {args.layout} layout, shards of {args.shard_size})",
            "loadtests.bench_footprint",
        ),
        "| part | "
        + " | ".join(f"disk at {s.points:,} (MiB)" for s in sizes)
        + " | bytes per point (slope) |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    names = sorted({name for s in sizes for name in s.disk})
    for name in [*names, "all"]:
        values = [sum(s.disk.values()) if name == "all" else s.disk.get(name, 0) for s in sizes]
        per_point = slope(values[0], values[-1], sizes)
        cells = " | ".join(f"{v / 2**20:.2f}" for v in values)
        lines.append(f"| {name} | {cells} | {per_point:.1f} |")
    lines += [
        "",
        "| resident memory of a fresh process serving searches | "
        + " | ".join(f"at {s.points:,} (MiB)" for s in sizes)
        + " | bytes per point (slope) |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    mapped = sorted({name for s in sizes for name in s.memory.files})
    for name in ["heap (anonymous)", *(f"pages of {name}" for name in mapped)]:
        part = name.removeprefix("pages of ")
        values = [s.memory.heap if part == name else s.memory.files.get(part, 0) for s in sizes]
        cells = " | ".join(f"{v / 2**20:.1f}" for v in values)
        lines.append(f"| {name} | {cells} | {slope(values[0], values[-1], sizes):.1f} |")

    graph = [s.disk.get("HNSW graph", 0) / s.points for s in sizes]
    lines += [
        "",
        f"Heap per byte on disk of the payload indexes, keywords index and id tracker: "
        f"{heap_per_disk_byte(list(sizes)):.2f}. HNSW graph per point: "
        + ", ".join(f"{g:.0f} B at {s.points:,}" for g, s in zip(graph, sizes, strict=True))
        + ".",
        "",
        "Index build: " + ", ".join(f"{s.build_s:.1f} s at {s.points:,}" for s in sizes) + ".",
    ]
    return "\n".join(lines)


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------

PARTS = (
    "originals",
    "quantized copies",
    "HNSW graph",
    *(f"index {name}" for name in INDEX_NAMES),
    "keywords index",
    "keywords storage",
    "id tracker",
    "payload",
)


def on_disk(part: str) -> Figure[list[Size]]:
    def value(sizes: list[Size]) -> float:
        return slope(sizes[0].disk.get(part, 0), sizes[-1].disk.get(part, 0), sizes)

    def context(sizes: list[Size]) -> str:
        pages = [s.memory.files.get(part, 0) for s in sizes]
        at = ", ".join(f"{s.disk.get(part, 0) / s.points:.0f} B at {s.points:,}" for s in sizes)
        return f"resident pages {slope(pages[0], pages[-1], sizes):.1f} B a photo; {at}"

    return Figure(f"{part}, on disk per photo", "B", value, context)


def heap_per_disk_byte(sizes: list[Size]) -> float:
    """The heap per byte on disk of the parts held as structures (the payload indexes, the
    keywords' index, the id tracker): the heap less the quantized copies (an array, loaded whole),
    over those parts' bytes on disk less their pages (the model's HEAP_PER_DISK_BYTE)."""

    def structures(s: Size) -> tuple[float, float]:
        names = [n for n in s.disk if n.startswith("index ") or n in HEAP_PARTS]
        heap = s.memory.heap - s.disk.get("quantized copies", 0)
        return heap, sum(s.disk[n] - s.memory.files.get(n, 0) for n in names)

    (heap_low, disk_low), (heap_high, disk_high) = structures(sizes[0]), structures(sizes[-1])
    return (heap_high - heap_low) / (disk_high - disk_low)


FIGURES: list[Figure[list[Size]]] = [
    *(on_disk(part) for part in PARTS),
    Figure(
        "the heap of a fresh process serving searches, per photo",
        "B",
        lambda sizes: slope(sizes[0].memory.heap, sizes[-1].memory.heap, sizes),
        lambda sizes: (
            "anonymous memory, quantized copies included; "
            + ", ".join(f"index build {s.build_s:.1f} s at {s.points:,}" for s in sizes)
        ),
    ),
    Figure(
        "the WAL, larger collection",
        "MiB",
        lambda sizes: sizes[-1].disk.get("WAL", 0) / 2**20,
        lambda sizes: (
            f"whatever the collection's size: {sizes[0].disk.get('WAL', 0) / 2**20:.0f} "
            f"MiB at {sizes[0].points:,}"
        ),
    ),
    Figure(
        "heap per byte on disk of the indexes and the id tracker",
        "x",
        heap_per_disk_byte,
        lambda sizes: "the payload indexes, keywords index and id tracker, quantized copies aside",
    ),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--points",
        type=lambda text: sorted(int(float(n)) for n in text.split(",")),
        default=[20_000, 100_000],
        help="collection sizes, comma-separated (at least two: per point is their slope)",
    )
    p.add_argument("--dim", type=int, default=512, help="ViT-B-32's embedding size")
    p.add_argument("--m", type=int, default=16, help="HNSW degree (the setting's default)")
    p.add_argument("--ef-construct", type=int, default=128)
    p.add_argument("--shard-size", type=int, default=10_000, help="the indexer's default")
    p.add_argument("--dir", default=None, help="where the collections are built (a temp folder)")
    p.add_argument("--layout", choices=LAYOUTS, default="shipped", help="the schema built")
    p.add_argument(
        "--threshold-kb",
        type=int,
        default=10_000,
        help="the shipped layout's full-scan threshold (bench_recall_filtered lowers it)",
    )
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep each collection in KEEP/<layout>-<points> (for bench_recall_filtered)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if len(args.points) < 2:
        raise SystemExit("--points needs two sizes at least")
    print(report(measure(args), args))


if __name__ == "__main__":
    main()
