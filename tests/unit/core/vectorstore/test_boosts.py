"""Business boosts (core/vectorstore/boosts.py): the formula in Python, and the engines'
formula queries over each kind of search, on Qdrant Edge and qdrant-client's local mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.keywords import query_vector
from core.payload import PhotoPayload
from core.vectorstore import Hit, SearchFilter, VectorStore
from core.vectorstore.boosts import boosted, boosted_score, popularity_share, recency
from core.vectorstore.engine import Boosted, Nearest, Prefetch, Rrf, Search
from tests.unit.core.vectorstore.conftest import COLL, PHOTOS, RRF_K

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DAY_S = 86400.0
BOOST = Boosted(
    recency_weight=0.3,
    recency_half_life_s=180 * DAY_S,
    now=NOW,
    popularity_weight=0.2,
    popularity_half=10.0,
)


def stored_fields(i: int) -> PhotoPayload:
    """Photo i's boost fields: a null date, none, or a date; a popularity for most."""
    fields: PhotoPayload = {}
    if i % 5 == 0:
        fields["created_at"] = None  # the indexer writes null for a photo without a date
    elif i % 5 != 1:  # i % 5 == 1: no created_at field at all
        fields["created_at"] = (NOW - timedelta(days=7 * i)).isoformat()
    if i % 3:
        fields["popularity"] = float(i % 17) * 2.5
    return fields


@pytest.fixture
def boostable(store: VectorStore) -> VectorStore:
    store.set_payloads(COLL, {p.photo_id: stored_fields(i) for i, p in enumerate(PHOTOS)})
    return store


def by_formula(hits: list[Hit], boost: Boosted = BOOST) -> list[tuple[str, float]]:
    """The unboosted hits re-scored by the formula recomputed here, best first."""
    scored = [(h.photo_id, boosted_score(h.score, h.payload, boost)) for h in hits]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


def assert_ranked(hits: list[Hit], expected: list[tuple[str, float]]) -> None:
    assert [h.photo_id for h in hits] == [pid for pid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-5)


def test_recency_halves_every_half_life_and_is_zero_without_a_date() -> None:
    assert recency(BOOST, NOW.isoformat()) == 1.0
    assert recency(BOOST, (NOW - timedelta(days=180)).isoformat()) == pytest.approx(0.5)
    assert recency(BOOST, (NOW - timedelta(days=360)).isoformat()) == pytest.approx(0.25)
    assert recency(BOOST, None) == 0.0
    assert recency(BOOST, "not a date") == 0.0


def test_popularity_share_is_half_at_the_half_and_zero_without_any() -> None:
    assert popularity_share(BOOST, 10.0) == 0.5
    assert popularity_share(BOOST, 30) == 0.75
    assert popularity_share(BOOST, None) == 0.0
    assert popularity_share(BOOST, 0.0) == 0.0


def test_the_formula_adds_both_terms_to_the_score() -> None:
    payload: PhotoPayload = {
        "created_at": (NOW - timedelta(days=180)).isoformat(),
        "popularity": 10.0,
    }
    assert boosted_score(0.5, payload, BOOST) == pytest.approx(0.5 + 0.3 * 0.5 + 0.2 * 0.5)
    assert boosted_score(0.5, {}, BOOST) == 0.5


def test_a_boosted_search_ranks_its_own_ranking_as_the_formula_prefetch() -> None:
    fusion = Search(Rrf(k=61), 10, prefetches=(Prefetch(Nearest([1.0], "image"), 20),))
    wrapped = boosted(fusion, BOOST, pool=40)
    assert wrapped.query == BOOST and wrapped.limit == 10
    assert wrapped.prefetches == (Prefetch(Rrf(k=61), 40, prefetches=fusion.prefetches),)
    assert boosted(fusion, None) is fusion
    with pytest.raises(ValueError, match="boosted once"):
        boosted(wrapped, BOOST)


@pytest.mark.parametrize("only_ann", [False, True])
def test_a_boosted_search_is_its_pool_reranked_by_the_formula(
    boostable: VectorStore, only_ann: bool
) -> None:
    query = PHOTOS[7].vector
    where = SearchFilter(photographer="ann") if only_ann else None
    pool = boostable.search(COLL, query, limit=40, filter=where)
    hits = boostable.search(COLL, query, limit=10, filter=where, boost=BOOST, pool=40)
    assert_ranked(hits, by_formula(pool)[:10])
    # The formula moved photos: a boosted page is not the plain one.
    assert [h.photo_id for h in hits] != [h.photo_id for h in pool[:10]]


def test_a_boosted_search_keeps_the_threshold_on_the_similarity(boostable: VectorStore) -> None:
    query = PHOTOS[7].vector
    pool = boostable.search(COLL, query, limit=40, score_threshold=0.5)
    hits = boostable.search(COLL, query, limit=40, score_threshold=0.5, boost=BOOST, pool=40)
    assert 0 < len(pool) < 40
    assert_ranked(hits, by_formula(pool))


def test_a_boosted_keyword_search_and_recommendation(boostable: VectorStore) -> None:
    words = query_vector("cat moon")
    plain = boostable.keyword_search(COLL, words, limit=30)
    hits = boostable.keyword_search(COLL, words, limit=5, boost=BOOST, pool=30)
    assert_ranked(hits, by_formula(plain)[:5])
    positive, negative = [PHOTOS[3].vector], [PHOTOS[4].vector]
    plain = boostable.recommend(COLL, positive, negative, limit=30)
    hits = boostable.recommend(COLL, positive, negative, limit=5, boost=BOOST, pool=30)
    assert_ranked(hits, by_formula(plain)[:5])


@pytest.mark.parametrize("keep", [None, 7])
def test_a_boosted_hybrid_search_reranks_the_whole_fusion(
    boostable: VectorStore, keep: int | None
) -> None:
    query, words = PHOTOS[7].vector, query_vector("cat moon")
    fusion = boostable.hybrid_search(COLL, query, words, limit=20, rrf_k=RRF_K)
    hits = boostable.hybrid_search(
        COLL, query, words, limit=20, rrf_k=RRF_K, keep=keep, boost=BOOST
    )
    expected = by_formula(fusion)
    assert_ranked(hits, expected if keep is None else expected[:keep])


def test_zero_weights_leave_the_scores_as_they_are(boostable: VectorStore) -> None:
    off = Boosted(0.0, 180 * DAY_S, NOW, 0.0, 10.0)
    query = PHOTOS[7].vector
    plain = boostable.search(COLL, query, limit=10)
    hits = boostable.search(COLL, query, limit=10, boost=off)
    assert [h.photo_id for h in hits] == [h.photo_id for h in plain]
    assert [h.score for h in hits] == pytest.approx([h.score for h in plain], rel=1e-6)
