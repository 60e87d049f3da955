"""A search's business boosts: its page's weights, else the replica's, at the clock's time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from core.settings_api import ApiSettings
from core.vectorstore import Hit
from core.vectorstore.boosts import boosted_score
from core.vectorstore.engine import Boosted
from query_api.schemas.search import Page

DAY_S = 86400.0


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Boosts:
    """The replica's default weights and the formula's constants (PHOTOSEARCH_API__BOOST_*);
    `now`: the clock that ages photos (tests pin it)."""

    recency: float = 0.0
    popularity: float = 0.0
    recency_half_life_days: float = 365.0
    popularity_half: float = 10.0
    now: Callable[[], datetime] = utc_now

    @classmethod
    def of(cls, api: ApiSettings) -> Boosts:
        return cls(
            api.boost_recency,
            api.boost_popularity,
            api.recency_half_life_days,
            api.popularity_half,
        )

    def weights(self, page: Page) -> tuple[float, float]:
        """The page's (recency, popularity) weights: its own, else the replica's."""
        recency = self.recency if page.boost_recency is None else page.boost_recency
        popularity = self.popularity if page.boost_popularity is None else page.boost_popularity
        return recency, popularity

    def active(self, page: Page) -> bool:
        """Whether the page is boosted: a boosted ranking is a pool re-ranked by the formula."""
        return any(self.weights(page))

    def of_page(self, page: Page) -> Boosted | None:
        """The page's formula, its time read once (every read of one search ages alike);
        None when both weights are 0: the search runs as it would without boosts."""
        recency, popularity = self.weights(page)
        if not (recency or popularity):
            return None
        return Boosted(
            recency_weight=recency,
            recency_half_life_s=self.recency_half_life_days * DAY_S,
            now=self.now(),
            popularity_weight=popularity,
            popularity_half=self.popularity_half,
        )


def rescored(hits: list[Hit], boost: Boosted | None) -> list[Hit]:
    """A ranking fused here (not by the store) re-scored by the formula, best first and ties
    by photo id; without a boost, as it is."""
    if boost is None:
        return hits
    scored = [replace(h, score=boosted_score(h.score, h.payload, boost)) for h in hits]
    return sorted(scored, key=lambda h: (-h.score, h.photo_id))
