"""Recall of the vector search against exact search: a small clustered set in Qdrant Edge with
its HNSW graph built, searched with the shipped settings (loadtests/bench_recall.py measures
the same on the benchmark's 100,000 vectors, setting by setting)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.settings import QdrantSettings
from core.vectorstore import PhotoPoint, SearchTuning, collection_name
from core.vectorstore.edge import EdgeStore
from core.vectorstore.schema import schema_of
from harness.store import TEXT_NOISE

# 20 MB of vectors: Qdrant Edge builds a graph only for a segment above 10 MB (its default
# indexing threshold) and searches a smaller one exactly, which would hold nothing here.
PHOTOS = 10_000
DIM = 512
CENTRES = 100
QUERIES = 300
K = 10
COLL = collection_name(1, "recall")
SHIPPED = QdrantSettings()

Indexed = tuple[EdgeStore, Embeddings, list[set[str]]]


def unit(rows: Embeddings) -> Embeddings:
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Indexed]:
    """The store, text-like queries near its clusters, and each query's exact top K (numpy)."""
    rng = np.random.default_rng(5)
    centres = unit(rng.standard_normal((CENTRES, DIM), dtype=np.float32))
    # Photos at cosine ~0.7-0.9 of their centre, as bench_api's store; queries as CLIP text
    # queries sit from photos: the best hits score ~0.3, the top 10 close together.
    spread = rng.uniform(0.5, 1.0, CENTRES).astype(np.float32) / np.sqrt(DIM)
    which = rng.integers(0, CENTRES, PHOTOS)
    photos = unit(
        centres[which] + rng.standard_normal((PHOTOS, DIM), np.float32) * spread[which, None]
    )
    near = rng.integers(0, CENTRES, QUERIES)
    noise = rng.standard_normal((QUERIES, DIM), np.float32) * np.float32(TEXT_NOISE / np.sqrt(DIM))
    queries = unit(centres[near] + noise)
    # The truth is over the vectors as the store keeps them: float16 originals (the shipped
    # schema), which an exact search compares with the query as float16 too.
    kept, asked = (v.astype(np.float16).astype(np.float32) for v in (photos, queries))
    truth = [{f"p{i}" for i in np.argsort(-(kept @ q))[:K]} for q in asked]

    path: Path = tmp_path_factory.mktemp("recall")
    store = EdgeStore(
        path,
        schema=schema_of(SHIPPED),
        tuning=SearchTuning.of(SHIPPED),
    )
    store.create_collection(COLL, DIM)
    for start in range(0, PHOTOS, 1000):
        store.upsert(COLL, [PhotoPoint(f"p{i}", photos[i], {}) for i in range(start, start + 1000)])
    store.optimize(COLL)  # builds the graph and the quantized copies
    yield store, queries, truth
    store.close()


def recall(indexed: Indexed, tuning: SearchTuning | None = None) -> float:
    """Mean share of each query's exact top K found; tuning None: the store's own settings."""
    store, queries, truth = indexed
    found = [{h.photo_id for h in store.search(COLL, q, limit=K, tuning=tuning)} for q in queries]
    return float(np.mean([len(f & t) / K for f, t in zip(found, truth, strict=True)]))


def test_the_graph_is_walked_not_every_vector_compared(indexed: Indexed) -> None:
    # hnsw_ef means nothing to an exact scan: a tiny beam losing neighbours shows the graph.
    assert recall(indexed, SearchTuning(hnsw_ef=4, ignore_quantization=True)) < 0.9


def test_exact_tuning_is_the_ground_truth(indexed: Indexed) -> None:
    assert recall(indexed, SearchTuning(hnsw_ef=4, exact=True)) == 1.0


def test_shipped_settings_find_99_percent_of_the_exact_top_10(indexed: Indexed) -> None:
    # The settings page (docs/operating/settings.md) quotes these.
    assert (SHIPPED.hnsw_ef, SHIPPED.oversampling) == (768, 3.0)
    assert recall(indexed) >= 0.99


@pytest.mark.parametrize(
    "weaker",
    [
        # No oversampling: the 4-bit copies misrank close neighbours, and rescoring only the
        # top K cannot bring back those they pushed out.
        SearchTuning(hnsw_ef=SHIPPED.hnsw_ef, oversampling=1.0),
        # A narrower beam: text-like queries, far from every photo, lose their way in the graph.
        SearchTuning(hnsw_ef=32, oversampling=SHIPPED.oversampling),
    ],
    ids=["no-oversampling", "ef-32"],
)
def test_weaker_settings_miss_the_target(indexed: Indexed, weaker: SearchTuning) -> None:
    assert recall(indexed, weaker) < 0.99
