"""What the simulated users ask: queries with a popularity curve, and the kind of each request.

Plain Python with no Locust import, so that the tests can check the curve without gevent.
"""

from __future__ import annotations

import bisect
import itertools
import random

from loadtests.scenario import Kind, Queries
from loadtests.vocabulary import Queries as QueryWords


class QueryMix:
    """Draws search texts: a Zipf-ranked head of popular queries, and one-off queries.

    The unique tail comes from the same generator as the head, after it, so a one-off query
    can never be a popular one (nor an earlier one-off): only the head can hit the cache.
    `salt` varies the tail between runs; the head stays the same, as real popular queries do.
    """

    def __init__(self, spec: Queries, salt: int = 0) -> None:
        words = QueryWords(spec.seed)
        self.popular = words.take(spec.popular)
        self._tail = words
        self._tail_tag = salt
        self._cumulative = _zipf_cumulative(spec)
        self.unique_share = spec.unique_share
        self._rng = random.Random(spec.seed * 1_000_003 + salt)

    def popular_rank(self) -> int:
        """0-based rank of a popular query, drawn by its Zipf weight."""
        return _draw_rank(self._rng, self._cumulative)

    def next(self) -> tuple[str, bool]:
        """(text, whether it is a one-off)."""
        if self._rng.random() < self.unique_share:
            # The salt keeps this run's one-offs apart from an earlier run's (its cache).
            return f"{self._tail.next()} {self._tail_tag:x}", True
        return self.popular[self.popular_rank()], False


class KindMix:
    """Which kind of request comes next, by the scenario's shares."""

    def __init__(self, shares: dict[Kind, float], seed: int) -> None:
        self.kinds: list[Kind] = list(shares)
        self._cumulative = list(itertools.accumulate(shares[k] for k in self.kinds))
        self._rng = random.Random(seed)

    def next(self) -> Kind:
        return self.kinds[_draw_rank(self._rng, self._cumulative)]


def expected_hit_ratio(spec: Queries, searches: int, seed: int = 0) -> float:
    """The share of `searches` draws that repeat an earlier text in the run: the cache hit
    ratio that a cold cache reaches at best (one-offs never repeat, so only ranks matter)."""
    rng = random.Random(seed)
    cumulative = _zipf_cumulative(spec)
    seen: set[int] = set()
    hits = 0
    for _ in range(searches):
        if rng.random() < spec.unique_share:
            continue
        rank = _draw_rank(rng, cumulative)
        hits += rank in seen
        seen.add(rank)
    return hits / searches if searches else 0.0


def _zipf_cumulative(spec: Queries) -> list[float]:
    return list(itertools.accumulate(1.0 / r**spec.zipf_s for r in range(1, spec.popular + 1)))


def _draw_rank(rng: random.Random, cumulative: list[float]) -> int:
    x = rng.random() * cumulative[-1]
    return min(bisect.bisect_right(cumulative, x), len(cumulative) - 1)
