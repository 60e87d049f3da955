"""The recall benchmark at scale, filtered: recall@10 against exact search and latency, on a
collection bench_footprint built and kept (the indexer's payload, clustered vectors).

    python -m loadtests.bench_footprint --points 100000,1000000 --keep /tmp/fp \
        --threshold-kb 100
    python -m loadtests.bench_recall_filtered --store /tmp/fp/shipped-1000000 [--queries 200]

Filters are windows of `created_at`, which the payload draws uniformly over 20 years: a window
of 1%, 5% or 20% of the span holds that share of every segment. The full-scan threshold of the
collection (bench_footprint --threshold-kb) decides whether such a filter scans its matches or
walks the graph: at 1e8, in segments of ~2e6 photos, every one of these walks the graph, so the
benchmark lowers it to make them do so at 1e6. A collection of the previous release keeps the
threshold it was made with. Each query is searched exactly (the filter's matches compared one
by one: the truth), then at each setting of a small grid, ACORN on and off. Prints Markdown;
no thresholds are enforced.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil

from core.embedding.arrays import Embeddings
from core.vectorstore import SearchFilter, SearchTuning, VectorStore
from core.vectorstore.edge import EdgeStore
from core.vectorstore.schema import CollectionSchema
from harness.store import TEXT_NOISE
from loadtests.bench_footprint import COLLECTION, clusters_for, in_child
from loadtests.footprint_parts import disk_parts, part_of
from loadtests.recall_search import query_vectors
from loadtests.startup import heading

K = 10
WARM_UP = 10
# harness/vocabulary.py's photo_payload: created_at uniform over 20 years from 2005.
SPAN_START = datetime(2005, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=20 * 365)
SHARES = (0.01, 0.05, 0.20)


def window(share: float, i: int) -> SearchFilter:
    """A created_at window holding `share` of the photos, placed by the query's number so that
    the queries do not all read one part of the collection."""
    length = SPAN * share
    start = SPAN_START + (SPAN - length) * ((i * 0.618) % 1.0)
    return SearchFilter(created_from=start, created_to=start + length)


@dataclass(frozen=True)
class Row:
    filter: str
    tuning: SearchTuning
    recall: float
    worst: float
    p50_ms: float
    p95_ms: float


def label(t: SearchTuning) -> str:
    return f"ef {t.hnsw_ef}, oversampling {t.oversampling:g}, ACORN {'on' if t.acorn else 'off'}"


def filter_of(share: float | None, i: int) -> SearchFilter | None:
    return None if share is None else window(share, i)


Truths = dict[float | None, list[list[str]]]


def exact_child(path: str, queries: Embeddings, out: multiprocessing.Queue[Truths]) -> None:
    """In a process of its own: each query's exact top K under each filter. Exact search reads
    every original vector; the searches measured after it must not find them in the page cache
    it leaves (nor the residency read at the end count them)."""
    store = EdgeStore(Path(path), schema=CollectionSchema(), tuning=SearchTuning(hnsw_ef=K))
    exact = SearchTuning(hnsw_ef=K, exact=True)
    try:
        found: Truths = {
            share: [
                [
                    h.photo_id
                    for h in store.search(
                        COLLECTION, q, limit=K, filter=filter_of(share, i), tuning=exact
                    )
                ]
                for i, q in enumerate(queries)
            ]
            for share in (None, *SHARES)
        }
    finally:
        store.close()
    out.put(found)


def exact_truths(store_dir: Path, queries: Embeddings) -> Truths:
    found = in_child(exact_child, str(store_dir), queries, timeout_s=3600)
    assert isinstance(found, dict)
    return found


def run(
    store: VectorStore,
    queries: Embeddings,
    share: float | None,
    truth: list[list[str]],
    grid: Sequence[SearchTuning],
) -> list[Row]:
    """Every setting of the grid against exact search, under one filter (None: unfiltered)."""
    name = "none" if share is None else f"{share:.0%} of the photos"
    rows = []
    for tuning in grid:
        for i, q in enumerate(queries[:WARM_UP]):
            store.search(COLLECTION, q, limit=K, filter=filter_of(share, i), tuning=tuning)
        seconds, recalls = [], []
        for i, q in enumerate(queries):
            started = time.perf_counter()
            hits = store.search(COLLECTION, q, limit=K, filter=filter_of(share, i), tuning=tuning)
            seconds.append(time.perf_counter() - started)
            found = {h.photo_id for h in hits}
            recalls.append(len(found & set(truth[i])) / max(len(truth[i]), 1))
        ms = np.asarray(seconds) * 1000
        rows.append(
            Row(
                name,
                tuning,
                float(np.mean(recalls)),
                float(np.min(recalls)),
                float(np.percentile(ms, 50)),
                float(np.percentile(ms, 95)),
            )
        )
        print(f"  {name}, {label(tuning)}: {rows[-1].recall:.4f}", file=sys.stderr, flush=True)
    return rows


def resident_parts(store_dir: Path) -> dict[str, int]:
    """This process's resident pages of each part's files (mmap), and its anonymous memory
    (the engine's heap: what is pinned) as "heap"."""
    me = psutil.Process()
    found: dict[str, int] = defaultdict(int)
    collections = store_dir / "collections"
    for mapped in me.memory_maps(grouped=True):
        if Path(mapped.path).is_relative_to(collections):
            found[part_of(Path(mapped.path).relative_to(collections))] += mapped.rss
    info = me.memory_info()
    found["heap"] = info.rss - info.shared
    return dict(found)


def residency(resident: dict[str, int], disk: dict[str, int], points: int) -> list[str]:
    """Markdown: each part's resident bytes after the searches, per photo and as a share of
    its bytes on disk (the capacity model's resident share of a cold part)."""
    lines = [
        "",
        "| part | on disk, B a photo | resident after the searches, B a photo | share |",
        "|---|---:|---:|---:|",
    ]
    for name in sorted(set(disk) | set(resident)):
        on_disk, held = disk.get(name, 0), resident.get(name, 0)
        share = f"{held / on_disk:.4f}" if on_disk else "-"
        lines.append(f"| {name} | {on_disk / points:.1f} | {held / points:.2f} | {share} |")
    return lines


def report(rows: Sequence[Row], args: argparse.Namespace, points: int) -> str:
    lines = [
        *heading(
            f"# Filtered recall@{K} on Qdrant Edge, {points:,} photos ({args.store.name})",
            "loadtests.bench_recall_filtered",
        ),
        "| filter | setting | recall@10 | worst query | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.filter} | {label(r.tuning)} | {r.recall:.4f} | {r.worst:.1f} | "
        f"{r.p50_ms:.2f} | {r.p95_ms:.2f} |"
        for r in rows
    ]
    return "\n".join(lines)


def points_in(store_dir: Path) -> int:
    store = EdgeStore(store_dir, schema=CollectionSchema(), tuning=SearchTuning(hnsw_ef=K))
    try:
        return store.count(COLLECTION)
    finally:
        store.close()


def numbers(text: str) -> list[float]:
    return [float(n) for n in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--store", type=Path, required=True, help="a folder bench_footprint kept")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--ef", type=lambda t: [int(n) for n in numbers(t)], default=[128])
    p.add_argument("--oversampling", type=numbers, default=[2.0, 4.0])
    args = p.parse_args(argv)
    points = points_in(args.store)
    queries = query_vectors("text", args.queries, args.dim, clusters_for(points), TEXT_NOISE)
    truths = exact_truths(args.store, queries)
    # The schema only makes new collections: the kept one opens with its own.
    store = EdgeStore(args.store, schema=CollectionSchema(), tuning=SearchTuning(hnsw_ef=128))
    try:
        grid = [
            SearchTuning(hnsw_ef=ef, oversampling=o, acorn=acorn)
            for ef in args.ef
            for o in args.oversampling
            for acorn in (False, True)
        ]
        rows: list[Row] = []
        for share in (None, *SHARES):
            rows += run(store, queries, share, truths[share], grid)
        held = resident_parts(args.store)
    finally:
        store.close()
    disk = disk_parts(args.store / "collections")
    print(report(rows, args, points))
    print("\n".join(residency(held, disk, points)))


if __name__ == "__main__":
    main()
