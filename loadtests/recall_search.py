"""The recall benchmark's searches: queries of each kind near the store's clusters, each setting
of a grid searched against exact search, recall@K and latency."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import SearchTuning, VectorStore
from harness.store import STORE_SEED, store_clusters

K = 10  # recall@K, and the searches' limit
TARGET = 0.99  # what the issue asks at every recommended setting
QUERY_SEED = 1  # not the store's seed: the queries are new points
KINDS = ("text", "photo")
WARM_UP = 20  # searches per setting before the timed ones


def query_vectors(kind: str, n: int, dim: int, clusters: int, text_noise: float) -> Embeddings:
    """`n` unit queries of a kind (see the module's docstring) near the store's clusters."""
    centres, spread = store_clusters(np.random.default_rng(STORE_SEED), dim, clusters)
    rng = np.random.default_rng(QUERY_SEED + KINDS.index(kind))
    which = rng.integers(0, clusters, n)
    scale = spread[which, None] if kind == "photo" else np.float32(text_noise / np.sqrt(dim))
    vectors = centres[which] + rng.standard_normal((n, dim), dtype=np.float32) * scale
    return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)


def label(tuning: SearchTuning) -> str:
    if tuning.exact:
        return "exact"
    if tuning.ignore_quantization:
        return f"ef {tuning.hnsw_ef}, int8 ignored"
    return f"ef {tuning.hnsw_ef}, oversampling {tuning.oversampling:g}"


def grid(efs: Sequence[int], oversamplings: Sequence[float]) -> list[SearchTuning]:
    """Every hnsw_ef x oversampling (int8 rescored), then each hnsw_ef on the original vectors."""
    quantized = [SearchTuning(hnsw_ef=ef, oversampling=o) for ef in efs for o in oversamplings]
    return quantized + [SearchTuning(hnsw_ef=ef, ignore_quantization=True) for ef in efs]


@dataclass(frozen=True)
class Measured:
    tuning: SearchTuning
    recall: float  # mean over the queries of |found & exact top K| / K
    worst: float  # the lowest recall of one query
    mean_ms: float
    p50_ms: float
    p99_ms: float


@dataclass
class KindFigures:
    """One kind of query on one store: the exact search and every setting."""

    kind: str
    top1: float  # mean cosine of the exact best hit
    tenth: float  # mean cosine of the exact 10th hit
    exact: Measured
    rows: list[Measured]

    def at(self, tuning: SearchTuning) -> Measured:
        return next(m for m in self.rows if m.tuning == tuning)

    def fastest(self, target: float = TARGET) -> Measured | None:
        """The lowest mean latency with recall >= target (int8 rescored settings only)."""
        held = [m for m in self.rows if m.recall >= target and not m.tuning.ignore_quantization]
        return min(held, key=lambda m: m.mean_ms, default=None)


def timed_search(
    store: VectorStore, collection: str, queries: Embeddings, tuning: SearchTuning
) -> tuple[list[list[str]], list[float], list[list[float]]]:
    """Each query's hits (photo ids), seconds and scores at one setting, after a warm-up."""
    for vector in queries[:WARM_UP]:
        store.search(collection, vector, limit=K, tuning=tuning)
    found, seconds, scores = [], [], []
    for vector in queries:
        started = time.perf_counter()
        hits = store.search(collection, vector, limit=K, tuning=tuning)
        seconds.append(time.perf_counter() - started)
        found.append([h.photo_id for h in hits])
        scores.append([h.score for h in hits])
    return found, seconds, scores


def measured(
    tuning: SearchTuning, found: list[list[str]], truth: list[list[str]], seconds: list[float]
) -> Measured:
    each = [len(set(f) & set(t)) / K for f, t in zip(found, truth, strict=True)]
    ms = np.asarray(seconds) * 1000
    return Measured(
        tuning,
        recall=float(np.mean(each)),
        worst=float(np.min(each)),
        mean_ms=float(ms.mean()),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
    )


def measure_kind(
    store: VectorStore,
    collection: str,
    kind: str,
    queries: Embeddings,
    settings: Sequence[SearchTuning],
) -> KindFigures:
    exact = SearchTuning(hnsw_ef=settings[0].hnsw_ef, exact=True)
    truth, seconds, scores = timed_search(store, collection, queries, exact)
    figures = KindFigures(
        kind,
        top1=float(np.mean([s[0] for s in scores])),
        tenth=float(np.mean([s[K - 1] for s in scores])),
        exact=measured(exact, truth, truth, seconds),
        rows=[],
    )
    for tuning in settings:
        found, seconds, _ = timed_search(store, collection, queries, tuning)
        figures.rows.append(measured(tuning, found, truth, seconds))
        print(f"  {kind}: {label(tuning)}: recall {figures.rows[-1].recall:.4f}", flush=True)
    return figures


def measure_store(
    store: VectorStore,
    collection: str,
    queries: dict[str, Embeddings],
    settings: Sequence[SearchTuning],
) -> list[KindFigures]:
    """Every kind of query at every setting; the store is closed after."""
    try:
        print(f"{len(settings)} settings x {len(queries)} kinds of queries ...", flush=True)
        return [
            measure_kind(store, collection, kind, vectors, settings)
            for kind, vectors in queries.items()
        ]
    finally:
        store.close()
