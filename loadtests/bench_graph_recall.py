"""What limits recall at 1e6: the graph alone, on synthetic data of three shapes.

    python -m loadtests.bench_graph_recall --points 1000000 --data nested --keep /tmp/graph \
        [--queries text|photo] [--ef 256,512,768] [--filter-ef 768] [--subgraph-m 0|6|8]

bench_recall_filtered measures the shipped collection with the indexer's whole payload; its
1e6 build takes ~35 CPU-min. This one builds only what a vector search walks: the schema's
graph (with created_at's payload subgraph at --subgraph-m; 0: none), quantized copies and
float16 originals (core/vectorstore/schema.py), each photo with a `created_at` drawn as
harness/vocabulary.py draws it (the filter's field), in ~10 min at 1e6. It asks whether recall
is the graph's or the data's: the same searches on

- flat: the benchmarks' clusters (harness/store.py): 1 subject per 100 photos, subjects at
  random (orthogonal) directions, each photo its subject plus isotropic noise;
- nested: subjects grouped 100 to a topic (a subject its topic plus noise, cosine ~0.8), so
  that the photos near a query's own subject are graded by similarity, as related subjects are;
- low-rank: flat subjects, each photo's noise on a decaying spectrum (variance ~ 1/rank, a
  participation ratio of ~28 dimensions of 512, about what CLIP's image embeddings show).

Text queries sit at cosine ~0.3 of their subject (harness/store.TEXT_NOISE), photo queries are
drawn like the photos. The truth is exact search under the same filter (created_at windows of
1%, 5% and 20%, bench_recall_filtered's). The full-scan threshold (--threshold-kb) is lowered
so that every filter walks the graph, and so that a 1% filter spans two of the subgraph's
blocks, as at 1e8. Filtered searches ask for ACORN, which the store leaves off where the filter
reads created_at alone and the schema gives it a subgraph (filters.walking). A kept folder is
searched again without a build. Prints Markdown; no thresholds are enforced.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import PhotoPoint, SearchTuning
from core.vectorstore.edge import EdgeStore
from core.vectorstore.schema import CollectionSchema
from harness.store import TEXT_NOISE
from loadtests.bench_footprint import COLLECTION, clusters_for
from loadtests.bench_recall_filtered import SHARES, SPAN, SPAN_START, window
from loadtests.startup import heading

K = 10
DATA = ("flat", "nested", "low-rank")
SUBJECTS_PER_TOPIC = 100
TOPIC_NOISE = 0.8  # a subject's noise around its topic: cosine ~0.78
UPSERT = 2000


def spectrum(dim: int) -> Embeddings:
    """Per-dimension scales of the low-rank noise: variance ~ 1/rank, the same total as flat."""
    s = (np.arange(1, dim + 1) ** -0.5).astype(np.float32)
    return np.asarray(s / np.sqrt((s**2).sum() / dim), dtype=np.float32)


def subjects(
    rng: np.random.Generator, data: str, dim: int, clusters: int
) -> tuple[Embeddings, Embeddings]:
    """Subject centres (unit) and each one's noise scale, drawn first from the seeded rng."""
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spread = rng.uniform(0.5, 1.0, clusters).astype(np.float32) / math.sqrt(dim)
    if data == "nested":
        topics = rng.standard_normal((max(clusters // SUBJECTS_PER_TOPIC, 1), dim), np.float32)
        topics /= np.linalg.norm(topics, axis=1, keepdims=True)
        noise = rng.standard_normal((clusters, dim), dtype=np.float32)
        centres = topics[np.arange(clusters) % len(topics)] + noise * np.float32(
            TOPIC_NOISE / math.sqrt(dim)
        )
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return centres, spread


def build(path: Path, data: str, points: int, dim: int, schema: CollectionSchema) -> float:
    """The collection, indexed; returns the wall seconds of the load and build."""
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    clusters = clusters_for(points)
    centres, spread = subjects(rng, data, dim, clusters)
    scale = spectrum(dim) if data == "low-rank" else np.ones(dim, dtype=np.float32)
    store = EdgeStore(path, schema=schema, tuning=SearchTuning(hnsw_ef=128), min_free_mb=0)
    try:
        store.create_collection(COLLECTION, dim, bulk=True)
        for start in range(0, points, UPSERT):
            n = min(UPSERT, points - start)
            dates = rng.random(n)
            which = rng.integers(0, clusters, n)
            noise = rng.standard_normal((n, dim), dtype=np.float32) * scale[None, :]
            vectors = centres[which] + noise * spread[which, None]
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.upsert(
                COLLECTION,
                [
                    PhotoPoint(
                        f"p{start + j}",
                        vectors[j],
                        {
                            "photo_id": f"p{start + j}",
                            "created_at": (SPAN_START + SPAN * float(dates[j])).isoformat(),
                        },
                    )
                    for j in range(n)
                ],
            )
        store.optimize(COLLECTION)
    finally:
        store.close()
    return time.perf_counter() - started


def queries(data: str, kind: str, n: int, dim: int, clusters: int) -> Embeddings:
    centres, spread = subjects(np.random.default_rng(0), data, dim, clusters)
    rng = np.random.default_rng(7)
    which = rng.integers(0, clusters, n)
    scale = spread[which, None] if kind == "photo" else np.float32(TEXT_NOISE / math.sqrt(dim))
    q = centres[which] + rng.standard_normal((n, dim), dtype=np.float32) * scale
    return np.asarray(q / np.linalg.norm(q, axis=1, keepdims=True), dtype=np.float32)


def measure(
    store: EdgeStore, qs: Embeddings, share: float | None, tuning: SearchTuning
) -> tuple[float, float, float]:
    """Recall@K against exact search under the same filter, and p50 / p95 ms."""
    exact = SearchTuning(hnsw_ef=K, exact=True)
    recalls, ms = [], []
    for i, q in enumerate(qs):
        where = None if share is None else window(share, i)
        truth = {
            h.photo_id for h in store.search(COLLECTION, q, limit=K, filter=where, tuning=exact)
        }
        started = time.perf_counter()
        hits = store.search(COLLECTION, q, limit=K, filter=where, tuning=tuning)
        ms.append((time.perf_counter() - started) * 1000)
        recalls.append(len({h.photo_id for h in hits} & truth) / max(len(truth), 1))
    return float(np.mean(recalls)), float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--points", type=lambda t: int(float(t)), default=1_000_000)
    p.add_argument("--data", choices=DATA, default="flat")
    p.add_argument("--queries", choices=("text", "photo"), default="text")
    p.add_argument("--n", type=int, default=200, help="queries")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construct", type=int, default=128)
    p.add_argument(
        "--subgraph-m", type=int, default=CollectionSchema().subgraph_m, help="0: no subgraph"
    )
    p.add_argument(
        "--threshold-kb",
        type=int,
        default=2500,
        help="the full-scan threshold, and the subgraph's blocks: a 1%% filter of a segment is "
        "two blocks, as at 1e8 (2e6 photos a segment, 10,000 KB of float16 vectors a block)",
    )
    p.add_argument("--ef", type=numbers, default=[128, 256, 512])
    p.add_argument("--filter-ef", type=numbers, default=[256, 1024])
    p.add_argument("--oversampling", type=float, default=3.0)
    p.add_argument("--keep", type=Path, required=True, help="where the collections are kept")
    args = p.parse_args(argv)
    schema = CollectionSchema(
        hnsw_m=args.m,
        hnsw_ef_construct=args.ef_construct,
        subgraph_m=args.subgraph_m,
        full_scan_threshold_kb=args.threshold_kb,
    )
    name = (
        f"{args.data}-{args.points}-m{args.m}-efc{args.ef_construct}"
        f"-pm{args.subgraph_m}-t{args.threshold_kb}"
    )
    path = args.keep / name
    built = "kept"
    if not path.exists():
        seconds = build(path, args.data, args.points, args.dim, schema)
        built = f"built in {seconds:.0f} s"
    qs = queries(args.data, args.queries, args.n, args.dim, clusters_for(args.points))
    store = EdgeStore(path, schema=CollectionSchema(), tuning=SearchTuning(hnsw_ef=128))
    lines = [
        *heading(
            f"# Graph recall@{K}, {args.points:,} photos, {args.data} data, {args.queries} queries",
            "loadtests.bench_graph_recall",
            f"; {name} {built}",
        ),
        "| filter | setting | recall@10 | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|",
    ]
    try:
        grid: list[tuple[float | None, SearchTuning, str]] = [
            (None, SearchTuning(hnsw_ef=ef, oversampling=args.oversampling), f"ef {ef}")
            for ef in args.ef
        ]
        grid += [
            (
                share,
                SearchTuning(hnsw_ef=ef, oversampling=args.oversampling, acorn=True),
                f"ef {ef}",
            )
            for share in SHARES
            for ef in args.filter_ef
        ]
        for share, tuning, setting in grid:
            recall, p50, p95 = measure(store, qs, share, tuning)
            shown = "none" if share is None else f"{share:.0%}"
            lines.append(f"| {shown} | {setting} | {recall:.4f} | {p50:.1f} | {p95:.1f} |")
            print(lines[-1], file=sys.stderr, flush=True)
    finally:
        store.close()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
