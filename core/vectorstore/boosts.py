"""Business boosts: a search's own ranking re-scored by recency and popularity (engine.Boosted)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Final

from core.payload import PhotoPayload
from core.vectorstore.engine import Boosted, Prefetch, Search

# The payload fields the formula reads.
CREATED: Final = "created_at"
POPULARITY: Final = "popularity"
# The formula's values for a point without the field. A missing date only keeps the decay
# defined: the formula multiplies it by "has a date", so an undated photo gets no recency.
DEFAULTS: dict[str, Any] = {POPULARITY: 0.0, CREATED: "1970-01-01T00:00:00+00:00"}


def boosted(search: Search, boost: Boosted | None, pool: int | None = None) -> Search:
    """The search re-ranked by the boost: its own ranking (query, prefetches, filter and
    threshold) becomes the prefetch of the formula, which scores its best `pool` (None:
    offset + limit) and returns the page the search asked for. No boost: the search itself."""
    if boost is None:
        return search
    if isinstance(search.query, Boosted):
        raise ValueError("a boosted search is boosted once")
    ranking = Prefetch(
        search.query,
        search.offset + search.limit if pool is None else pool,
        search.filter,
        search.score_threshold,
        search.tuning,
        search.prefetches,
    )
    return Search(
        boost,
        search.limit,
        search.offset,
        prefetches=(ranking,),
        fields=search.fields,
        with_vector=search.with_vector,
    )


def recency(boost: Boosted, created_at: object) -> float:
    """0.5^(age / half-life) of a payload's created_at; 0 without one (or one unreadable)."""
    if not isinstance(created_at, str):
        return 0.0
    try:
        created = datetime.fromisoformat(created_at)
    except ValueError:
        return 0.0
    age = abs((boost.now - created).total_seconds())
    return math.pow(0.5, age / boost.recency_half_life_s)


def popularity_share(boost: Boosted, popularity: object) -> float:
    """p / (p + half): 0 for none, 1/2 at `popularity_half`, towards 1 for the most popular."""
    p = popularity if isinstance(popularity, int | float) and popularity > 0 else 0.0
    return float(p) / (float(p) + boost.popularity_half) if p else 0.0


def boosted_score(score: float, payload: PhotoPayload, boost: Boosted) -> float:
    """The formula of engine.Boosted over one hit, in Python: for a ranking fused here (the
    engine evaluates it everywhere else), and for tests that recompute the engines' scores."""
    return (
        score
        + boost.recency_weight * recency(boost, payload.get(CREATED))
        + boost.popularity_weight * popularity_share(boost, payload.get(POPULARITY))
    )
