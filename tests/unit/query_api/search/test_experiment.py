"""query_api/search/experiment.py: which searches an experiment draws, the page of two searches run
at once, the live answer alone when the candidate fails, and clicks credited (on real Redis)
until a significant win switches the experiment itself when configured."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import CollectorRegistry
from redis import Redis

from core.experiments import current, decision_for, start
from core.feedback.events import Action, Event
from core.feedback.searchlog import SearchRecord, Side, new_search_id
from core.jobs import Jobs
from core.jobstatus import JobKind, JobPhase, JobState
from core.vectorstore import collection_name
from query_api.http.errors import Unavailable
from query_api.http.timing import Stages
from query_api.schemas.answers import Result, SearchResponse
from query_api.schemas.search import TextSearch
from query_api.search.experiment import (
    AutoSwitch,
    Draw,
    ExperimentMetrics,
    Experiments,
    interleaved_search,
)

LIVE, CANDIDATE = "photos-m1-live00000000", "photos-m2-cand00000000"
OFF = AutoSwitch(enabled=False, alpha=0.05, min_impressions=10)


def _experiments(redis: Redis, prefix: str, auto: AutoSwitch = OFF) -> Experiments:
    metrics = ExperimentMetrics(CollectorRegistry())
    return Experiments(redis, prefix, metrics, job=Jobs(redis, prefix).get, cache_s=0.0, auto=auto)


def _answer(collection: str, ids: list[str]) -> SearchResponse:
    results = [
        Result(id=i, metadata={}, image_url=f"/{i}", thumbnail_url=f"/{i}/t", score=1.0)
        for i in ids
    ]
    return SearchResponse(
        results=results,
        mode="vector",
        model_version=int(collection.split("-")[1][1:]),
        collection=collection,
        limit=len(ids),
        offset=0,
        next_offset=None,
        took_ms=1.0,
        search_id=new_search_id(),
    )


def test_a_share_of_one_draws_every_first_page_that_embeds(redis: Redis) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    experiments = _experiments(redis, prefix)
    query = TextSearch(q="a red square")
    assert asyncio.run(experiments.draw(query, None)) is None  # no experiment yet
    started = start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=1.0)
    draw = asyncio.run(experiments.draw(query, "session-0123456789"))
    assert draw is not None
    assert (draw.experiment_id, draw.candidate) == (started.id, CANDIDATE)
    assert asyncio.run(experiments.draw(TextSearch(q="a", offset=20), None)) is None
    assert asyncio.run(experiments.draw(TextSearch(q="a", mode="keyword"), None)) is None


def test_a_reindexs_candidate_is_drawn_only_once_it_has_caught_up(redis: Redis) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    jobs = Jobs(redis, prefix)
    job_id = jobs.create(
        JobKind.REINDEX, state=JobState.RUNNING, phase=JobPhase.LOAD, model_version=2
    )
    candidate = collection_name(2, job_id)
    jobs.update(job_id, collection=candidate)
    experiments = _experiments(redis, prefix)
    start(redis, prefix, live=LIVE, candidate=candidate, share=1.0)
    query = TextSearch(q="a red square")
    for phase in (
        JobPhase.LOAD,
        JobPhase.INDEXING,
        JobPhase.GROUPING,
    ):  # half built: not a fair comparison
        jobs.update(job_id, phase=phase)
        assert asyncio.run(experiments.draw(query, None)) is None
    jobs.update(job_id, phase=JobPhase.CATCH_UP, state=JobState.FINALIZING)
    assert asyncio.run(experiments.draw(query, None)) is not None
    jobs.finish(job_id, JobState.CANCELLED)  # no longer kept current
    assert asyncio.run(experiments.draw(query, None)) is None


def test_the_page_interleaves_both_searches_and_labels_each_result() -> None:
    asked: list[str | None] = []

    async def search(collection: str | None, stages: Stages) -> SearchResponse:
        asked.append(collection)
        if collection is None:
            return _answer(LIVE, ["a", "b", "c", "d"])
        return _answer(CANDIDATE, ["x", "a", "y", "z"])

    metrics = ExperimentMetrics(CollectorRegistry())
    draw = Draw("e1", CANDIDATE, new_search_id())
    answer, sides = asyncio.run(interleaved_search(draw, 4, search, Stages(), metrics))
    assert sorted(asked, key=str) == [None, CANDIDATE]
    assert sides is not None and len(sides) == 4
    shown = dict(zip([r.id for r in answer.results], sides, strict=True))
    assert shown.items() <= {"a": "live", "b": "live", "x": "candidate", "y": "candidate"}.items()
    assert sides.count("live") == sides.count("candidate") == 2
    assert (answer.collection, answer.search_id) == (LIVE, draw.search_id)
    assert metrics.searches.labels("interleaved")._value.get() == 1


def test_a_failed_candidate_leaves_the_live_answer_alone() -> None:
    async def search(collection: str | None, stages: Stages) -> SearchResponse:
        if collection is None:
            return _answer(LIVE, ["a", "b"])
        raise Unavailable("triton", "model version 2 is not served", 1)

    metrics = ExperimentMetrics(CollectorRegistry())
    draw = Draw("e1", CANDIDATE, new_search_id())
    answer, sides = asyncio.run(interleaved_search(draw, 2, search, Stages(), metrics))
    assert sides is None
    assert [r.id for r in answer.results] == ["a", "b"]
    assert metrics.searches.labels("failed")._value.get() == 1


def _record(sides: list[Side], at: float = 1e12) -> SearchRecord:
    return SearchRecord(
        search_id=new_search_id(),
        collection=LIVE,
        model_version=1,
        shown=["a", "b", "c", "d"][: len(sides)],
        sides=sides,
        at=at,
    )


def _click(record: SearchRecord, photo: str, action: Action = "opened") -> Event:
    rank = record.rank_of(photo)
    assert rank is not None
    return Event(search_id=record.search_id, photo_id=photo, rank=rank, action=action)


def test_clicks_on_interleaved_results_are_credited_once_each(redis: Redis) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    experiments = _experiments(redis, prefix)
    start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=1.0)
    won = _record(["live", "candidate", "live", "candidate"])
    lost = _record(["candidate", "live"])
    plain = won.model_copy(update={"sides": None, "search_id": new_search_id()})
    before = _record(["candidate"], at=0.0)  # searched before the experiment started

    async def run() -> None:
        await experiments.credit(won, [_click(won, "b"), _click(won, "d"), _click(won, "a")])
        await experiments.credit(won, [_click(won, "b")])  # the same click again
        await experiments.credit(lost, [_click(lost, "b"), _click(lost, "a", "skipped")])
        await experiments.credit(plain, [_click(plain, "b")])
        await experiments.credit(before, [_click(before, "a")])

    asyncio.run(run())
    found = current(redis, prefix)
    assert found is not None
    assert (found.impressions, found.wins, found.losses, found.ties) == (2, 1, 1, 0)
    assert experiments.metrics.credits.labels("candidate")._value.get() == 2


@pytest.mark.parametrize("enabled", [True, False])
def test_a_significant_win_switches_itself_only_when_configured(
    redis: Redis, enabled: bool
) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    auto = AutoSwitch(enabled=enabled, alpha=0.05, min_impressions=8)
    experiments = _experiments(redis, prefix, auto)
    start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=1.0)

    async def run() -> None:
        for _ in range(8):
            record = _record(["live", "candidate"])
            await experiments.credit(record, [_click(record, "b")])

    asyncio.run(run())
    ended = current(redis, prefix)
    assert ended is not None and ended.wins == 8
    if enabled:  # 8 to 0: p = 2 / 256 < 0.05
        assert (ended.state, ended.ended_by) == ("switch", "auto")
        assert "won 8 to 0" in ended.reason
        assert decision_for(redis, prefix, CANDIDATE) == "switch"
    else:
        assert ended.state == "running"
