"""Ranking metrics at a cut-off (nDCG, recall, MRR) and bootstrap intervals over queries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def _gain(grade: int) -> float:
    # Exponential gain (Burges et al. 2005): a grade-2 photo at the top counts three times a
    # grade-1 one, so a set's "perfect" photos weigh more than its merely fitting ones.
    return float(2**grade - 1) if grade > 0 else 0.0


def _discount(rank: int) -> float:
    """The discount of rank `rank` (from 1): 1 / log2(rank + 1)."""
    return 1.0 / math.log2(rank + 1)


def _top(ranked: Sequence[str], k: int) -> list[str]:
    """The first k distinct ids: a photo ranked twice counts once, where it first appears."""
    return list(dict.fromkeys(ranked))[:k]


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Normalized discounted cumulative gain of the first k: 0 when no judged photo is
    relevant (the query cannot be answered well or badly)."""
    dcg = sum(_gain(grades.get(p, 0)) * _discount(r) for r, p in enumerate(_top(ranked, k), 1))
    # The ideal ranking holds every judged photo, best first, whether or not it was found.
    best = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    ideal = sum(_gain(g) * _discount(r) for r, g in enumerate(best, 1))
    return dcg / ideal if ideal > 0 else 0.0


def recall_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """The share of the relevant photos (grade > 0) among the first k; 0 with none."""
    relevant = {p for p, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_top(ranked, k))) / len(relevant)


def mrr_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """1 / the rank of the first relevant photo among the first k; 0 when none is."""
    for rank, photo_id in enumerate(_top(ranked, k), start=1):
        if grades.get(photo_id, 0) > 0:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True)
class Interval:
    """A mean over queries and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def to_dict(self, digits: int | None = None) -> dict[str, float]:
        """As JSON-able data, each figure rounded to `digits` if given."""
        figures = {"mean": self.mean, "low": self.low, "high": self.high}
        if digits is None:
            return figures
        return {name: round(value, digits) for name, value in figures.items()}


def _resampled_means(values: Floats, samples: int, seed: int) -> Floats:
    """`samples` means of the values, each over len(values) drawn with replacement."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), size=(samples, len(values)))
    return np.asarray(values[picks].mean(axis=1), dtype=np.float64)


def _interval(values: Floats, samples: int, seed: int, confidence: float) -> Interval:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    if samples < 1:
        raise ValueError(f"samples {samples} is not positive")
    if len(values) == 0:
        raise ValueError("no values to resample: the set has no query")
    means = _resampled_means(values, samples, seed)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(values.mean()), float(low), float(high))


def bootstrap(
    values: Sequence[float], *, samples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """The mean of per-query values and its percentile bootstrap interval: `samples` means of
    the queries drawn with replacement (numpy's Generator seeded with `seed`), and their
    (1 - confidence) / 2 and (1 + confidence) / 2 percentiles (numpy's linear interpolation)."""
    return _interval(np.asarray(values, dtype=np.float64), samples, seed, confidence)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    samples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """The mean of b - a over the same queries and its bootstrap interval: a query drawn is
    drawn for both sides, so what the queries share (some are hard for any model) cancels."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} values against {len(b)}: a paired difference needs pairs")
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return _interval(diff, samples, seed, confidence)
