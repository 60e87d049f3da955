"""The search benchmark's relevance: queries from the demo photos' metadata, which photos each
names, reciprocal rank, recall, the chance level and the weighted fusion."""

from __future__ import annotations

import random

import pytest

from core.demo import DEMO_PHOTOS
from core.keywords import words
from core.vectorstore import Hit
from loadtests.relevance import (
    AT,
    KINDS,
    chance_rr,
    demo_queries,
    photo_words,
    recall,
    reciprocal_rank,
    weighted,
)


def test_queries_of_three_kinds_name_the_photos_whose_title_and_tags_hold_their_words() -> None:
    queries = demo_queries(DEMO_PHOTOS)
    assert {q.kind for q in queries} == set(KINDS)
    assert len({frozenset(words(q.text)) for q in queries}) == len(queries)
    for photo in DEMO_PHOTOS:
        named = [q for q in queries if photo.id in q.relevant]
        assert "title" in {q.kind for q in named}, photo.id  # its own title names it
    for query in queries:
        # Relevant: exactly the photos whose title and tags hold every word of the query.
        wanted = set(words(query.text))
        assert query.relevant == {p.id for p in DEMO_PHOTOS if wanted <= photo_words(p)}
    altered = [q for q in queries if q.altered]
    assert altered and any(q.text.isupper() for q in altered)
    assert any("é" in q.text or "á" in q.text for q in altered)


def test_reciprocal_rank_and_recall_count_the_first_ten_only() -> None:
    ranking = [f"p{i}" for i in range(20)]
    assert reciprocal_rank(ranking, frozenset({"p2", "p5"})) == pytest.approx(1 / 3)
    assert reciprocal_rank(ranking, frozenset({f"p{AT}"})) == 0.0
    assert recall(ranking, frozenset({"p0", "p15"})) == 0.5


def test_the_chance_level_is_the_mean_reciprocal_rank_of_shuffled_orders() -> None:
    photos = [f"p{i}" for i in range(20)]
    relevant = frozenset(photos[:3])
    r = random.Random(0)
    shuffled = [reciprocal_rank(r.sample(photos, len(photos)), relevant) for _ in range(20000)]
    assert chance_rr(20, 3) == pytest.approx(sum(shuffled) / len(shuffled), abs=0.01)
    assert chance_rr(20, 20) == 1.0


def test_weighted_fusion_scales_each_ranking_to_0_1_before_weighing_them() -> None:
    vector = [Hit("a", 0.9, {}), Hit("b", 0.7, {}), Hit("c", 0.1, {})]  # 1, 0.75, 0
    keyword = [Hit("c", 12.0, {}), Hit("b", 2.0, {}), Hit("a", 1.0, {})]  # 1, 1/11, 0
    # a: 0.7 x 1; b: 0.7 x 0.75 + 0.3 / 11; c: 0.3 x 1.
    assert weighted(vector, keyword, 0.3) == ["a", "b", "c"]
    # a: 0.4; b: 0.4 x 0.75 + 0.6 / 11; c: 0.6.
    assert weighted(vector, keyword, 0.6) == ["c", "a", "b"]
