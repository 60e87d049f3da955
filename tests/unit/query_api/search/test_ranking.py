"""Fusion, collapse, maximal marginal relevance and newest-first over plain hits."""

from __future__ import annotations

from typing import Any, Unpack

import numpy as np
import pytest

from core.payload import PhotoPayload
from core.vectorstore import GROUP_FIELD, Hit
from query_api.search import ranking
from query_api.search.ranking import collapse, diversify, fuse, newest_first


def hit(pid: str, score: float = 0.0, vector: Any = None, **payload: Unpack[PhotoPayload]) -> Hit:
    v = None if vector is None else np.asarray(vector, dtype=np.float32)
    return Hit(pid, score, {"photo_id": pid, **payload}, v)


def test_reciprocal_rank_fusion_sums_one_over_k_plus_rank() -> None:
    by_vector = [hit("a"), hit("b"), hit("c")]
    by_words = [hit("c"), hit("d")]
    fused = fuse([by_vector, by_words], k=60)
    scores = {h.photo_id: h.score for h in fused}
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62})
    # c is in both; b and d tie at 1/62, and come in photo-id order.
    assert [h.photo_id for h in fused] == ["c", "a", "b", "d"]
    assert fuse([[], []]) == []


def test_a_weighted_fusion_shortens_the_weighted_rankings_ranks() -> None:
    by_vector = [hit("a"), hit("b"), hit("c")]
    by_words = [hit("c"), hit("d")]
    fused = fuse([by_vector, by_words], k=60, weights=[1.0, 2.0])
    scores = {h.photo_id: h.score for h in fused}
    # The engines' weighted RRF: 1 / (k + rank / weight).
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62, "c": 1 / 63 + 1 / 60.5, "d": 1 / 61})
    assert [h.photo_id for h in fused] == ["c", "a", "d", "b"]


def test_fusion_keeps_a_vector_from_either_ranking() -> None:
    fused = fuse([[hit("a")], [hit("a", vector=[1, 0])]])
    assert fused[0].vector is not None


def test_collapse_keeps_the_best_of_each_group_in_rank_order() -> None:
    hits = [
        Hit("a", 0.0, {GROUP_FIELD: "g"}),
        Hit("b", 0.0, {}),  # written before groups: its own
        Hit("c", 0.0, {GROUP_FIELD: "g"}),
        Hit("d", 0.0, {GROUP_FIELD: "d"}),
        Hit("e", 0.0, {GROUP_FIELD: "b"}),  # joined b's group, b unlabelled
    ]
    assert [h.photo_id for h in collapse(hits)] == ["a", "b", "d"]


def test_maximal_marginal_relevance() -> None:
    # a and b are one picture; c is another, a little less relevant.
    hits = [
        hit("a", 0.9, [1, 0]),
        hit("b", 0.89, [1, 0.01]),
        hit("c", 0.8, [0, 1]),
        hit("d", 0.1, [0.7, 0.7]),
    ]
    assert [h.photo_id for h in diversify(hits, 0.0, 3)] == ["a", "b", "c"]
    assert [h.photo_id for h in diversify(hits, 0.5, 3)][:2] == ["a", "c"]
    # At 1 relevance no longer counts: each next is the least like those chosen.
    assert [h.photo_id for h in diversify(hits, 1.0, 2)] == ["a", "c"]
    assert len(diversify(hits, 0.5, 10)) == 4


def test_newest_first_puts_undated_last_and_reads_zones() -> None:
    hits = [
        hit("old", created_at="2020-01-01"),
        hit("none"),
        hit("new", created_at="2024-05-01T10:00:00+02:00"),
        hit("mid", created_at="2022-03-01T00:00:00Z"),
        hit("bad", created_at="last spring"),
        hit("new-utc", created_at="2024-05-01T09:00:00"),  # no zone: UTC, after "new"
    ]
    assert [h.photo_id for h in newest_first(hits)] == [
        "new-utc",
        "new",
        "mid",
        "old",
        "none",
        "bad",
    ]


def test_diversity_picks_alike_with_every_similarity_at_once_or_a_row_per_pick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    hits = [hit(f"p{i:03d}", 1 - i / 300, vectors[i]) for i in range(300)]
    with_gram = [h.photo_id for h in diversify(hits, 0.5, 120)]
    monkeypatch.setattr(ranking, "GRAM_MAX", 10)  # this pool is larger: a row per pick
    by_rows = [h.photo_id for h in diversify(hits, 0.5, 120)]
    assert with_gram == by_rows
    assert len(set(with_gram)) == 120  # none picked twice
    assert with_gram[0] == "p000"  # the most relevant first
    assert with_gram[:10] != [h.photo_id for h in hits[:10]]  # and not the ranking itself
