"""A judgement set evaluated on the in-process Qdrant Edge store with fixed vectors: the
rankings the API's text search gives, their metrics by hand, two collections compared."""

from __future__ import annotations

import math

import pytest

from core.embedding.manifest import SearchCalibration
from core.keywords import query_vector
from core.quality.judgements import Query
from core.quality.runner import (
    RRF_K,
    collection_ranker,
    compare,
    evaluate,
    from_dict,
    score,
    to_dict,
)
from core.vectorstore import LIVE_ALIAS, Hit, VectorStore
from tests.unit.core.quality.conftest import BAD, GOOD, SET, TEXTS, Embedder


def _first_of_each_group(hits: list[Hit]) -> list[str]:
    """cat1 and cat2 are one group: whichever ranks first stands for both."""
    ids = [h.photo_id for h in hits]
    second = max(ids.index("cat1"), ids.index("cat2"))
    return [p for i, p in enumerate(ids) if i != second][:10]


def test_vector_ranking_collapses_near_duplicates(store: VectorStore) -> None:
    embed = Embedder()
    rank = collection_ranker(store, LIVE_ALIAS, embed=embed, mode="vector", k=3)
    assert list(rank(SET.queries[0])) == ["cat1", "dog", "moon"]
    # The live alias's collection is model version 1: the query is embedded with it.
    assert embed.calls == [(("a cat",), 1)]
    every = collection_ranker(store, GOOD, embed=embed, mode="vector", k=3, collapse=False)
    assert list(every(SET.queries[0])) == ["cat1", "cat2", "dog"]


def test_keyword_ranking_embeds_nothing(store: VectorStore) -> None:
    embed = Embedder()
    rank = collection_ranker(store, GOOD, embed=embed, mode="keyword")
    assert list(rank(Query("k", "coffee cup"))) == ["cup"]
    # cat1 and cat2 tie (two words each, "cat" one of them): by photo id, cat1 stands for both.
    every = collection_ranker(store, GOOD, embed=embed, mode="keyword", collapse=False)
    assert list(every(Query("k", "cat"))) == ["cat1", "cat2"]
    assert list(rank(Query("k", "cat"))) == ["cat1"]
    assert list(rank(Query("k", "the of"))) == []
    assert embed.calls == []


def test_hybrid_ranking_is_the_stores_fusion_collapsed(store: VectorStore) -> None:
    rank = collection_ranker(store, GOOD, embed=Embedder(), mode="hybrid", k=10)
    fused = store.hybrid_search(
        GOOD, TEXTS["the moon"], query_vector("the moon"), limit=100, rrf_k=RRF_K
    )
    assert [h.photo_id for h in fused][:2] == ["moon", "cup"]
    assert list(rank(SET.queries[1])) == _first_of_each_group(fused)


def test_hybrid_ranking_fuses_with_the_versions_calibration(store: VectorStore) -> None:
    query = Query("s", "a sofa")  # the cup first by vector; cat1 alone by words
    plain = collection_ranker(store, GOOD, embed=Embedder(), mode="hybrid")
    # Equal weights: cat1 has 1/(60 + 3) + 1/(60 + 1), above the cup's 1/(60 + 1).
    assert plain(query)[0] == "cat1"
    # A version calibrated to k 1 and words weighed 0.01 (a rank r of words counts as r / 0.01):
    # cat1 has 1/(1 + 3) + 1/(1 + 100), below the cup's 1/(1 + 1).
    calibration = SearchCalibration(rrf_k=1, keyword_weight=0.01)
    weighed = collection_ranker(
        store, GOOD, embed=Embedder(), mode="hybrid", calibration=calibration
    )
    assert weighed(query)[0] == "cup"
    fused = store.hybrid_search(
        GOOD, TEXTS["a sofa"], query_vector("a sofa"), limit=100, rrf_k=1, keyword_weight=0.01
    )
    assert list(weighed(query)) == _first_of_each_group(fused)


def test_evaluation_by_hand(store: VectorStore) -> None:
    rank = collection_ranker(store, GOOD, embed=Embedder(), mode="vector")
    found = evaluate(SET, rank, collection=GOOD, mode="vector", samples=200)
    assert [s.query.id for s in found.per_query] == ["q1", "q2"]
    q1, q2 = found.per_query
    # q1: cat1 and cat2 relevant; collapsed, only cat1 is shown, at rank 1.
    assert q1.ranked == ("cat1", "dog", "moon", "cup")
    assert q1.ndcg == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert (q1.recall, q1.mrr) == (0.5, 1.0)
    # q2: the moon (grade 2) first.
    assert (q2.ndcg, q2.recall, q2.mrr) == (1.0, 1.0, 1.0)
    assert found.ndcg.mean == pytest.approx((q1.ndcg + 1) / 2)
    assert found.recall.mean == 0.75
    assert found.ndcg.low <= found.ndcg.mean <= found.ndcg.high
    animal, _, _ = found.by_tag["animal"]
    assert (animal.mean, animal.low, animal.high) == pytest.approx((q1.ndcg,) * 3)
    assert set(found.by_tag) == {"animal", "space"}
    assert from_dict(to_dict(found)) == found


def test_compare_gives_the_paired_difference(store: VectorStore) -> None:
    embed = Embedder()
    good = evaluate(
        SET,
        collection_ranker(store, GOOD, embed=embed, mode="vector"),
        collection=GOOD,
        mode="vector",
    )
    bad = evaluate(
        SET,
        collection_ranker(store, BAD, embed=embed, mode="vector"),
        collection=BAD,
        mode="vector",
    )
    # The broken model ranks the cup first for both: the cat at 3, the moon at 2.
    assert [s.ranked[:3] for s in bad.per_query] == [("cup", "moon", "cat1")] * 2
    assert [s.mrr for s in bad.per_query] == [1 / 3, 1 / 2]
    assert [s.mrr for s in good.per_query] == [1, 1]
    difference = compare(good, bad)
    assert difference["mrr"].mean == pytest.approx((-2 / 3 - 1 / 2) / 2)
    # Every resample's mean lies between the two queries' losses.
    assert difference["mrr"].low >= -2 / 3 - 1e-9
    assert difference["mrr"].high <= -1 / 2 + 1e-9
    assert difference["ndcg"].mean == pytest.approx(bad.ndcg.mean - good.ndcg.mean)
    assert difference["ndcg"].high < 0
    # One tag's queries alone: the moon's loses 1/2 only.
    space = compare(good, bad, tag="space")["mrr"]
    assert (space.mean, space.low, space.high) == pytest.approx((-0.5, -0.5, -0.5))


def test_score_ranks_with_any_callable() -> None:
    found = score(SET, lambda q: ["moon", "moon", "cat2"], k=2)
    assert [s.ranked for s in found] == [("moon", "cat2"), ("moon", "cat2")]
    assert [s.recall for s in found] == [0.5, 1.0]
