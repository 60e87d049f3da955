"""nDCG, recall and MRR at k, and the bootstrap intervals, against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.quality.metrics import Interval, bootstrap, mrr_at, ndcg_at, paired_difference, recall_at

# Photo b is perfect (grade 2), d and e fit (grade 1), a and c were judged not relevant or not
# at all; e is never found.
GRADES = {"a": 0, "b": 2, "d": 1, "e": 1}
RANKED = ["a", "b", "c", "d"]


def test_ndcg_at_3_by_hand() -> None:
    # DCG@3: only b (gain 2^2 - 1 = 3) at rank 2, discounted by log2(3).
    dcg = 3 / math.log2(3)
    # Ideal: grades 2, 1, 1 at ranks 1, 2, 3: 3/log2(2) + 1/log2(3) + 1/log2(4).
    ideal = 3 / 1 + 1 / math.log2(3) + 1 / 2
    assert ndcg_at(RANKED, GRADES, 3) == pytest.approx(dcg / ideal)
    assert ndcg_at(RANKED, GRADES, 3) == pytest.approx(0.458200, abs=1e-6)


def test_ndcg_at_4_counts_the_fitting_photo_at_rank_4() -> None:
    dcg = 3 / math.log2(3) + 1 / math.log2(5)
    ideal = 3 + 1 / math.log2(3) + 1 / 2
    assert ndcg_at(RANKED, GRADES, 4) == pytest.approx(dcg / ideal)


def test_ndcg_is_one_for_the_ideal_ranking_and_zero_with_nothing_relevant() -> None:
    assert ndcg_at(["b", "d", "e"], GRADES, 10) == pytest.approx(1.0)
    assert ndcg_at(["b", "e", "d"], GRADES, 10) == pytest.approx(1.0)  # d and e tie
    assert ndcg_at(["x", "y"], GRADES, 10) == 0.0
    assert ndcg_at(["a"], {"a": 0}, 10) == 0.0


def test_recall_at_k_by_hand() -> None:
    # Relevant: b, d, e. The first 3 hold b; the first 4 hold b and d.
    assert recall_at(RANKED, GRADES, 3) == pytest.approx(1 / 3)
    assert recall_at(RANKED, GRADES, 4) == pytest.approx(2 / 3)
    assert recall_at(RANKED, {}, 4) == 0.0


def test_mrr_at_k_by_hand() -> None:
    # The first relevant photo, b, is at rank 2 (a is judged but grade 0).
    assert mrr_at(RANKED, GRADES, 10) == 0.5
    assert mrr_at(RANKED, GRADES, 1) == 0.0
    assert mrr_at(["d"], GRADES, 10) == 1.0


def test_a_photo_ranked_twice_counts_once() -> None:
    assert recall_at(["b", "b", "b", "d"], GRADES, 3) == pytest.approx(2 / 3)
    assert mrr_at(["a", "a", "b"], GRADES, 2) == 0.5


def test_bootstrap_recomputed_by_hand() -> None:
    values = [0.2, 0.9, 0.5, 0.0, 1.0]
    # The same draws, by hand: 200 resamples of 5 query indexes from numpy's Generator(7).
    draws = np.random.default_rng(7).integers(0, 5, size=(200, 5)).tolist()
    means = sorted(sum(values[i] for i in row) / 5 for row in draws)

    def percentile(p: float) -> float:  # numpy's "linear": between the ranks around p
        at = p / 100 * (len(means) - 1)
        below = math.floor(at)
        return float(means[below] + (at - below) * (means[min(below + 1, 199)] - means[below]))

    found = bootstrap(values, samples=200, seed=7)
    assert found.mean == pytest.approx(2.6 / 5)
    assert found.low == pytest.approx(percentile(2.5))
    assert found.high == pytest.approx(percentile(97.5))
    assert found.low < found.mean < found.high


def test_bootstrap_of_two_queries_spans_both_ends() -> None:
    # Resamples of [0, 1] have mean 0 (chance 1/4), 0.5 (1/2) or 1 (1/4): the 2.5th and
    # 97.5th percentiles of 1,000 of them are 0 and 1.
    assert bootstrap([0.0, 1.0]) == Interval(0.5, 0.0, 1.0)


def test_bootstrap_of_equal_values_is_that_value() -> None:
    assert bootstrap([0.25] * 7, samples=50) == Interval(0.25, 0.25, 0.25)


def test_bootstrap_is_seeded() -> None:
    values = [0.1, 0.4, 0.35, 0.8, 0.9, 0.05]
    assert bootstrap(values, seed=3) == bootstrap(values, seed=3)
    assert bootstrap(values, seed=3) != bootstrap(values, seed=4)


def test_a_narrower_confidence_gives_a_narrower_interval() -> None:
    values = [0.1, 0.4, 0.35, 0.8, 0.9, 0.05]
    wide, narrow = bootstrap(values), bootstrap(values, confidence=0.5)
    assert wide.low < narrow.low < narrow.high < wide.high


def test_paired_difference_cancels_what_the_queries_share() -> None:
    # b is better than a by 0.2 on every query, though the queries differ widely: the pairs'
    # differences are all 0.2, so the interval is that point.
    a = [0.1, 0.5, 0.7, 0.2]
    b = [0.3, 0.7, 0.9, 0.4]
    paired = paired_difference(a, b)
    assert (paired.mean, paired.low, paired.high) == pytest.approx((0.2, 0.2, 0.2))
    # Unpaired, the spread between queries would hide it: the two intervals overlap.
    assert bootstrap(b).low < bootstrap(a).high


def test_paired_difference_resamples_the_pairs_jointly() -> None:
    a, b = [0.0, 0.5, 1.0], [0.5, 0.5, 0.5]
    diffs = [0.5, 0.0, -0.5]
    assert paired_difference(a, b, seed=2) == bootstrap(diffs, seed=2)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="pairs"):
        paired_difference([0.1], [0.1, 0.2])
    with pytest.raises(ValueError, match="no query"):
        bootstrap([])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap([0.1], confidence=1.5)
