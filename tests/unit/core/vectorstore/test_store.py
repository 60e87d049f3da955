"""The store written once over an engine, on Qdrant Edge and on qdrant-client's local mode:
the hybrid search in one query, and the neutral writes of the keywords vector."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from core.keywords import document_vector, query_vector
from core.settings import QdrantSettings
from core.vectorstore import (
    KEYWORDS_VECTOR,
    VECTOR_NAME,
    Hit,
    KeywordsUnavailable,
    PhotoPoint,
    SearchFilter,
    VectorStore,
    collection_name,
    point_id,
)
from core.vectorstore.engine import DeleteVectors, SetVectors, embedding_of, hit_of, stored_of
from core.vectorstore.keyword_vectors import keyword_writes
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.store import PAYLOAD_INDEXES
from tests.support.stores import ENGINES, engine_store

DIM = 8
COLL = collection_name(1, "u")
WORDS = ["red", "green", "blue", "cat", "dog", "tree", "sun", "moon"]
RRF_K = 60


def photos(n: int = 120) -> list[PhotoPoint]:
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        PhotoPoint(
            f"p{i:03d}",
            vectors[i],
            {"title": " ".join(rng.choice(WORDS, 2)), "photographer": "ann" if i % 2 else "bob"},
        )
        for i in range(n)
    ]


PHOTOS = photos()


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = engine_store(request.param, tmp_path, (COLL,), DIM)
    s.upsert(COLL, PHOTOS)
    yield s
    s.close()


def by_hand(rankings: list[list[Hit]]) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: 1 / (k + rank) a ranking, rank from 1; ties by photo id."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.photo_id] = fused.get(hit.photo_id, 0.0) + 1 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


@pytest.mark.parametrize("limit", [5, 20])
@pytest.mark.parametrize("only_ann", [False, True])
def test_a_hybrid_search_is_the_fusion_of_the_two_rankings(
    store: VectorStore, limit: int, only_ann: bool
) -> None:
    query, words = PHOTOS[7].vector, query_vector("cat moon")
    where = SearchFilter(photographer="ann") if only_ann else None
    by_vector = store.search(COLL, query, limit=limit, filter=where)
    by_words = store.keyword_search(COLL, words, limit=limit, filter=where)
    assert len(by_words) == limit  # both rankings full: the fusion has ties to order
    hits = store.hybrid_search(COLL, query, words, limit=limit, rrf_k=RRF_K, filter=where)
    expected = by_hand([by_vector, by_words])
    assert [h.photo_id for h in hits] == [pid for pid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([score for _, score in expected], rel=1e-6)
    assert all(h.vector is None and h.payload["photo_id"] == h.photo_id for h in hits)
    if only_ann:
        assert {h.payload["photographer"] for h in hits} == {"ann"}


def test_without_words_a_hybrid_search_is_the_vector_ranking(store: VectorStore) -> None:
    query = PHOTOS[3].vector
    by_vector = store.search(COLL, query, limit=10)
    hits = store.hybrid_search(
        COLL, query, query_vector("the of"), limit=10, rrf_k=RRF_K, with_vectors=True
    )
    assert [h.photo_id for h in hits] == [h.photo_id for h in by_vector]
    assert [h.score for h in hits] == pytest.approx([1 / (RRF_K + r) for r in range(1, 11)])
    assert all(h.vector is not None and h.vector.shape == (DIM,) for h in hits)


def test_a_hybrid_search_says_when_the_collection_has_no_keywords(tmp_path: Path) -> None:
    client = QdrantClient(location=":memory:")
    old = qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
    client.create_collection(COLL, vectors_config={VECTOR_NAME: old})
    store = QdrantStore(client, settings=QdrantSettings(url=":memory:"))
    try:
        store.upsert(COLL, PHOTOS[:10])
        with pytest.raises(KeywordsUnavailable):
            store.hybrid_search(COLL, PHOTOS[0].vector, query_vector("cat"), limit=5, rrf_k=60)
        # No word to match: no keywords are needed.
        hits = store.hybrid_search(COLL, PHOTOS[0].vector, query_vector("a"), limit=5, rrf_k=60)
        assert hits[0].photo_id == "p000"
    finally:
        store.close()


def test_keyword_writes_give_words_a_vector_and_take_it_from_the_wordless() -> None:
    payloads: dict[str, dict[str, Any]] = {"a": {"title": "Red tulips"}, "b": {"tags": []}}
    set_vectors, delete = keyword_writes(payloads)
    assert set_vectors == SetVectors(
        {point_id("a"): {KEYWORDS_VECTOR: document_vector(payloads["a"])}}
    )
    assert delete == DeleteVectors((point_id("b"),), (KEYWORDS_VECTOR,))
    assert keyword_writes({"b": {}}) == [DeleteVectors((point_id("b"),), (KEYWORDS_VECTOR,))]


def test_an_engines_point_becomes_a_hit_or_a_stored_photo() -> None:
    vectors = {VECTOR_NAME: [0.6, 0.8], KEYWORDS_VECTOR: object()}
    hit = hit_of(0.5, {"photo_id": "p1", "tags": ["x"]}, vectors)
    assert (hit.photo_id, hit.score, hit.payload) == ("p1", 0.5, {"photo_id": "p1", "tags": ["x"]})
    assert hit.vector is not None and hit.vector.dtype == np.float32
    np.testing.assert_allclose(hit.vector, [0.6, 0.8])
    assert embedding_of(None) is None and embedding_of({}) is None
    assert (
        stored_of(None, False).payload == {} and stored_of({"photo_id": "q"}, None).vector is None
    )


def test_both_engines_serve_the_one_store_with_every_filtered_field_indexed(
    store: VectorStore,
) -> None:
    assert isinstance(store, VectorStore)
    filtered = {"tags", "photographer", "license", "created_at", "shard", "source_key"}
    assert filtered | {"dup_group", "photo_id", "model_version"} == set(PAYLOAD_INDEXES)
    assert PAYLOAD_INDEXES["created_at"] == "datetime"
    assert PAYLOAD_INDEXES["model_version"] == "integer"
