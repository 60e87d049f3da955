"""The store's searches (core/vectorstore/store_searches.py), on Qdrant Edge and on
qdrant-client's local mode: the hybrid search in one query of the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from core.keywords import query_vector
from core.settings import QdrantSettings
from core.vectorstore import VECTOR_NAME, Hit, KeywordsUnavailable, SearchFilter
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.store_searches import Searches
from tests.unit.core.vectorstore.conftest import COLL, DIM, PHOTOS

RRF_K = 60


def by_hand(
    rankings: list[list[Hit]], weights: tuple[float, ...] = (1.0, 1.0)
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: 1 / (k + rank / weight) a ranking, rank from 1; ties by
    photo id."""
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=False):
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.photo_id] = fused.get(hit.photo_id, 0.0) + 1 / (RRF_K + rank / weight)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


@pytest.mark.parametrize("limit", [5, 20])
@pytest.mark.parametrize("only_ann", [False, True])
def test_a_hybrid_search_is_the_fusion_of_the_two_rankings(
    store: Searches, limit: int, only_ann: bool
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


@pytest.mark.parametrize("keyword_weight", [0.25, 3.0])
def test_a_weighted_hybrid_search_weighs_the_keyword_ranking(
    store: Searches, keyword_weight: float
) -> None:
    query, words = PHOTOS[7].vector, query_vector("cat moon")
    by_vector = store.search(COLL, query, limit=20)
    by_words = store.keyword_search(COLL, words, limit=20)
    hits = store.hybrid_search(
        COLL, query, words, limit=20, rrf_k=RRF_K, keyword_weight=keyword_weight
    )
    expected = by_hand([by_vector, by_words], (1.0, keyword_weight))
    assert [h.photo_id for h in hits] == [pid for pid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([score for _, score in expected], rel=1e-6)
    # The weight moves the order: not the unweighted fusion's.
    assert [h.photo_id for h in hits] != [pid for pid, _ in by_hand([by_vector, by_words])]


def test_a_kept_hybrid_search_is_the_head_of_the_whole_fusion_ties_included(
    store: Searches,
) -> None:
    query, words = PHOTOS[7].vector, query_vector("cat moon")
    whole = store.hybrid_search(COLL, query, words, limit=20, rrf_k=RRF_K)
    ties = [k for k in range(1, len(whole)) if whole[k - 1].score == whole[k].score]
    assert ties, "no cut falls between two photos of equal score: nothing tested"
    for keep in range(1, len(whole) + 1):
        kept = store.hybrid_search(COLL, query, words, limit=20, rrf_k=RRF_K, keep=keep)
        assert [h.photo_id for h in kept] == [h.photo_id for h in whole[:keep]], keep


def test_without_words_a_hybrid_search_is_the_vector_ranking(store: Searches) -> None:
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
