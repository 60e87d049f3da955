"""A hybrid text search on both engines: fused by the store in one query, or here where the
engine cannot give the same answer (a score threshold, `not` descriptions); and the fallbacks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from core.embedding.manifest import SearchCalibration
from core.keywords import query_vector
from core.vectorstore import Hit, PhotoPoint, VectorStore, collection_name
from query_api.http.errors import ApiError
from query_api.schemas.search import TextSearch
from query_api.search.arrange import Read
from query_api.search.hybrid import HybridPlan
from query_api.search.ranking import RRF_K
from tests.support.stores import ENGINES, engine_holding, store_without_keywords

DIM = 8
COLL = collection_name(1, "h")
WORDS = ["harbour", "crane", "tulips", "dusk", "lighthouse", "snow", "road", "market"]


def photos(n: int = 80) -> list[PhotoPoint]:
    rng = np.random.default_rng(9)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        PhotoPoint(f"p{i:02d}", vectors[i], {"title": " ".join(rng.choice(WORDS, 2))})
        for i in range(n)
    ]


PHOTOS = photos()
QUERY = PHOTOS[4].vector


@pytest.fixture(scope="module", params=ENGINES)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VectorStore]:
    folder = tmp_path_factory.mktemp("hybrid")
    with engine_holding(request.param, folder, COLL, DIM, PHOTOS) as store:
        yield store


def plan(store: VectorStore, q: str, **options: Any) -> HybridPlan:
    vector = None if options.get("mode") == "keyword" else QUERY
    return HybridPlan.of(store, COLL, TextSearch(q=q, **options), vector)


def rrf(*rankings: list[Hit], k: int = RRF_K, weights: tuple[float, ...] = (1, 1)) -> list[str]:
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.photo_id] = fused.get(hit.photo_id, 0.0) + 1 / (k + rank / weight)
    return sorted(fused, key=lambda pid: (-fused[pid], pid))


def ids(hits: list[Hit]) -> list[str]:
    return [h.photo_id for h in hits]


def test_a_hybrid_search_fuses_the_vector_and_keyword_rankings(store: VectorStore) -> None:
    hybrid = plan(store, "harbour at dusk")
    ranking = hybrid.fetch(Read(10))
    by_vector = store.search(COLL, QUERY, limit=10)
    by_words = store.keyword_search(COLL, query_vector("harbour dusk"), limit=10)
    # The engine's fusion keeps the best 10: what a pool of 10 re-ranks.
    assert ids(ranking.hits) == rrf(by_vector, by_words)[:10]
    assert ranking.more and hybrid.mode_ran == "hybrid"
    assert all(h.vector is None for h in ranking.hits)
    assert all(h.vector is not None for h in hybrid.fetch(Read(10, with_vectors=True)).hits)


@pytest.mark.parametrize("threshold", [None, -1.0])
def test_a_model_versions_calibration_sets_the_fusion(
    store: VectorStore, threshold: float | None
) -> None:
    """By the engine, and here (a threshold every photo passes): the same calibrated fusion."""
    calibration = SearchCalibration(rrf_k=10, keyword_weight=4.0)
    query = TextSearch(q="harbour at dusk", score_threshold=threshold)
    hybrid = HybridPlan.of(store, COLL, query, QUERY, calibration)
    by_vector = store.search(COLL, QUERY, limit=10)
    by_words = store.keyword_search(COLL, query_vector("harbour dusk"), limit=10)
    expected = rrf(by_vector, by_words, k=10, weights=(1, 4))[:10]
    assert ids(hybrid.fetch(Read(10)).hits) == expected
    assert expected != rrf(by_vector, by_words)[:10]  # the calibration moved the ranking


def test_a_threshold_keeps_only_keyword_matches_as_close_as_it_asks(store: VectorStore) -> None:
    cosine = {p.photo_id: float(p.vector @ QUERY) for p in PHOTOS}
    ordered = sorted(cosine.values())
    threshold = (ordered[-20] + ordered[-21]) / 2  # the 20 closest photos pass
    hits = plan(store, "tulips market", score_threshold=threshold).fetch(Read(80)).hits
    assert {h.photo_id for h in hits} == {pid for pid, c in cosine.items() if c >= threshold}
    by_vector = store.search(COLL, QUERY, limit=80, score_threshold=threshold)
    by_words = [
        h
        for h in store.keyword_search(COLL, query_vector("tulips market"), limit=80)
        if cosine[h.photo_id] >= threshold
    ]
    assert ids(hits) == rrf(by_vector, by_words)


def test_not_takes_photos_with_all_its_words_out_of_the_keyword_ranking(store: VectorStore) -> None:
    hits = plan(store, "crane snow", **{"not": ["snow road"]}).fetch(Read(80)).hits
    words = {h.photo_id: set((h.payload["title"] or "").split()) for h in hits}
    by_vector = set(ids(store.search(COLL, QUERY, limit=80)))
    # A photo holding both words is found by its vector only, never by its words.
    for pid, held in words.items():
        if {"snow", "road"} <= held:
            assert pid in by_vector
    kept = store.keyword_search(COLL, query_vector("crane snow"), limit=80)
    unwanted = [h for h in kept if {"snow", "road"} <= set((h.payload["title"] or "").split())]
    assert unwanted  # the data holds some: the test would see them
    vector_only = store.search(COLL, QUERY, limit=80)
    wanted = [h for h in kept if h not in unwanted]
    assert ids(hits) == rrf(vector_only, wanted)


def test_keyword_mode_ranks_by_words_alone(store: VectorStore) -> None:
    ranking = plan(store, "lighthouse", mode="keyword").fetch(Read(5))
    assert ids(ranking.hits) == ids(store.keyword_search(COLL, query_vector("lighthouse"), limit=5))
    assert ranking.more
    with pytest.raises(ApiError) as refused:
        plan(store, "the of a", mode="keyword")
    assert refused.value.status == 422


def test_a_collection_without_keywords_runs_a_hybrid_search_as_vector() -> None:
    store = store_without_keywords(COLL, DIM)
    try:
        store.upsert(COLL, PHOTOS)
        for options in ({}, {"score_threshold": -1.0}):
            hybrid = plan(store, "harbour", **options)
            ranking = hybrid.fetch(Read(10))
            assert hybrid.mode_ran == "vector"
            assert ids(ranking.hits) == ids(store.search(COLL, QUERY, limit=10))
        with pytest.raises(ApiError) as refused:
            plan(store, "harbour", mode="keyword").fetch(Read(10))
        assert refused.value.status == 409
    finally:
        store.close()
