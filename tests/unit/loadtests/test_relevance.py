"""The search benchmark's relevance: a judgement set's queries ranked and measured at 10 with
intervals, a seeded random order beside them, and the table of both."""

from __future__ import annotations

from collections.abc import Sequence

from core.quality.judgements import JudgementSet, Query
from loadtests.relevance import AT, CHANCE, chance_ranker, evaluations, relevance_table

PHOTOS = [f"p{i:02d}" for i in range(30)]
SET = JudgementSet(
    "tiny",
    (Query("q1", "a red circle"), Query("q2", "a blue square"), Query("q3", "judged nothing")),
    {"q1": {"p00": 2, "p01": 1}, "q2": {"p05": 2}, "q3": {"p09": 0}},
)


def perfect(query: Query) -> Sequence[str]:
    return sorted(SET.grades(query.id), key=lambda p: -SET.grades(query.id)[p])


def last(query: Query) -> Sequence[str]:
    """Every judged photo behind ten others: none in the first ten."""
    return [p for p in PHOTOS if p not in SET.grades(query.id)][:AT] + list(SET.grades(query.id))


def test_a_ranking_is_measured_on_the_judgements_not_on_its_own_words() -> None:
    found = evaluations(
        SET,
        {"perfect": ("keyword", perfect), "last": ("vector", last)},
        collection="tiny",
        samples=200,
        seed=0,
    )
    best, worst = found["perfect"], found["last"]
    assert [s.query.id for s in best.per_query] == ["q1", "q2"]  # q3 judges nothing relevant
    assert (best.ndcg.mean, best.recall.mean, best.mrr.mean) == (1.0, 1.0, 1.0)
    assert (worst.ndcg.mean, worst.recall.mean, worst.mrr.mean) == (0.0, 0.0, 0.0)
    assert (best.mode, worst.mode) == ("keyword", "vector")


def test_the_chance_ranking_draws_ten_photos_anew_for_each_query_and_repeats_with_its_seed() -> (
    None
):
    first, again = chance_ranker(PHOTOS, seed=3), chance_ranker(list(reversed(PHOTOS)), seed=3)
    drawn = [first(q) for q in SET.queries]
    assert drawn == [again(q) for q in SET.queries]
    assert all(len(d) == AT == len(set(d)) and set(d) <= set(PHOTOS) for d in drawn)
    assert drawn[0] != drawn[1]
    assert chance_ranker(PHOTOS[:4])(SET.queries[0]) != []


def test_the_table_has_a_row_of_intervals_for_each_ranking() -> None:
    found = evaluations(
        SET,
        {"perfect": ("hybrid", perfect), CHANCE: ("vector", chance_ranker(PHOTOS))},
        collection="tiny",
        samples=200,
        seed=0,
    )
    lines = relevance_table(found).splitlines()
    assert lines[0] == "| ranking | queries | nDCG@10 | recall@10 | MRR@10 |"
    assert lines[2] == "| perfect | 2 | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | " + (
        "1.000 [1.000, 1.000] |"
    )
    assert lines[3].startswith(f"| {CHANCE} | 2 | ")
    assert len(lines) == 4
