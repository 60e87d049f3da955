"""How a text search runs an interleaved experiment: which searches are in its share, the
candidate's search beside the live one (each embedded by its own model version), the page
they make by team draft, and the clicks credited to the side that showed each result.

Only first pages (offset 0) of searches that embed (vector or hybrid) are interleaved: a later
page is the live ranking's, so a searcher in the share may meet a result of page one again on
page two. The candidate's search is never charged to the caller's rate limit; it costs a second
embedding, counted in photosearch_experiment_searches_total.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from redis import Redis
from redis.exceptions import RedisError

from core.experiments import (
    Experiment,
    ExperimentError,
    Side,
    auto_decision,
    candidate_ready,
    credit,
    end,
    reindex_of,
    running,
)
from core.feedback.events import CLICKS, Event
from core.feedback.searchlog import SearchRecord, new_search_id
from core.feedback.searchlog import Side as ShownSide
from core.jobstatus import JobStatus
from query_api.http.timing import Stages
from query_api.schemas.answers import SearchResponse
from query_api.schemas.search import TextSearch
from query_api.search.interleave import assigned, clicked_sides, team_draft

log = logging.getLogger(__name__)

# A search of one collection: None searches the live one. Its own stages, as the two run at once.
SearchIn = Callable[[str | None, Stages], Awaitable[SearchResponse]]


@dataclass(frozen=True)
class Draw:
    """A search drawn into the experiment's share: the page it makes and its search's id."""

    experiment_id: str
    candidate: str
    search_id: str

    @property
    def seed(self) -> str:
        return f"{self.experiment_id}:{self.search_id}"


@dataclass(frozen=True)
class AutoSwitch:
    """When an experiment decides "switch" itself (PHOTOSEARCH_API__EXPERIMENT_*)."""

    enabled: bool
    alpha: float
    min_impressions: int


class ExperimentMetrics:
    """The experiment's counters, in the API's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.searches = Counter(
            "photosearch_experiment_searches_total",
            "Searches of an experiment's candidate collection (a second embedding each), by "
            "outcome: interleaved, or failed (the live ranking answered alone).",
            ["outcome"],
            registry=registry,
        )
        self.credits = Counter(
            "photosearch_experiment_credits_total",
            "Clicks on interleaved results credited to a side (repeats are not).",
            ["side"],
            registry=registry,
        )


class Experiments:
    """A replica's view of the running experiment, read from PhotoSearch's Redis at most once
    every `cache_s` (by `now`, a monotonic clock); a failing Redis means no experiment, never a
    failed search."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        metrics: ExperimentMetrics,
        *,
        job: Callable[[str], JobStatus | None],
        cache_s: float,
        auto: AutoSwitch,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.metrics = metrics
        self.job = job
        self.cache_s = cache_s
        self.auto = auto
        self.now = now
        self._read: tuple[Experiment | None, float] | None = None

    async def running(self) -> Experiment | None:
        """The running experiment, once its candidate is ready to compare (`candidate_ready`):
        until then its searches are the live collection's alone."""
        at = self.now()
        if self._read is not None and at < self._read[1]:
            return self._read[0]
        try:
            found = await asyncio.to_thread(self._ready)
        except (RedisError, ExperimentError) as exc:
            log.warning("could not read the running experiment: %s", exc)
            found = None
        self._read = (found, at + self.cache_s)
        return found

    def _ready(self) -> Experiment | None:
        found = running(self.redis, self.prefix)
        if found is None or not candidate_ready(reindex_of(found.candidate, self.job)):
            return None
        return found

    async def draw(self, query: TextSearch, session: str | None) -> Draw | None:
        """The search's draw if it is in the running experiment's share: by its session, so a
        searcher stays on one side of the share, else by its own id."""
        if query.offset or query.mode == "keyword":
            return None
        experiment = await self.running()
        if experiment is None:
            return None
        search_id = new_search_id()
        if not assigned(experiment.id, session or search_id, experiment.share):
            return None
        return Draw(experiment.id, experiment.candidate, search_id)

    async def credit(self, record: SearchRecord, events: Sequence[Event]) -> None:
        """Credit the clicks of an interleaved search (the search log's Credit seam)."""
        if record.sides is None or not any(event.action in CLICKS for event in events):
            return
        experiment = await self.running()
        # A search made before this experiment started belongs to none that runs now.
        if experiment is None or record.at < experiment.started_at:
            return
        sides: list[Side] = [side if side != "both" else "live" for side in record.sides]
        clicks = clicked_sides(
            record.shown, sides, (event.photo_id for event in events if event.action in CLICKS)
        )
        try:
            await asyncio.to_thread(self._credit, experiment.id, record.search_id, clicks)
        except (RedisError, ExperimentError) as exc:
            log.warning("could not credit experiment %s: %s", experiment.id, exc)

    def _credit(self, experiment_id: str, search_id: str, clicks: list[tuple[str, Side]]) -> None:
        for photo_id, side in clicks:
            if credit(self.redis, self.prefix, experiment_id, search_id, photo_id, side):
                self.metrics.credits.labels(side).inc()
        if not self.auto.enabled:
            return
        experiment = running(self.redis, self.prefix)
        if experiment is None or experiment.id != experiment_id:
            return
        decision = auto_decision(
            experiment, alpha=self.auto.alpha, min_impressions=self.auto.min_impressions
        )
        if decision is not None:
            reason = (
                f"the candidate won {experiment.wins} to {experiment.losses} "
                f"(p = {experiment.p_value:.3g} < {self.auto.alpha})"
            )
            end(self.redis, self.prefix, experiment_id, decision, by="auto", reason=reason)
            self._read = None


async def interleaved_search(
    draw: Draw, limit: int, search: SearchIn, stages: Stages, metrics: ExperimentMetrics
) -> tuple[SearchResponse, list[ShownSide] | None]:
    """The live and the candidate searches at once, and their team-draft page with the side
    of each result; the live answer alone (no sides) when the candidate's search failed."""
    each = [Stages(), Stages()]
    live, candidate = await asyncio.gather(
        search(None, each[0]), search(draw.candidate, each[1]), return_exceptions=True
    )
    stages.overlapped(each)
    if isinstance(live, BaseException):
        raise live
    if isinstance(candidate, BaseException):
        if not isinstance(candidate, Exception):
            raise candidate
        metrics.searches.labels("failed").inc()
        log.warning("the candidate %s did not answer: %s", draw.candidate, candidate)
        return live, None
    if live.collection == candidate.collection:  # the candidate is live now: nothing to compare
        return live, None
    metrics.searches.labels("interleaved").inc()
    results = {
        "live": {result.id: result for result in live.results},
        "candidate": {result.id: result for result in candidate.results},
    }
    page = team_draft(
        [r.id for r in live.results], [r.id for r in candidate.results], limit=limit, seed=draw.seed
    )
    answer = live.model_copy(
        update={
            "results": [results[side][photo] for photo, side in page],
            "search_id": draw.search_id,
        }
    )
    sides: list[ShownSide] = [side for _, side in page]
    return answer, sides
