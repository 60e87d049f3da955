"""The re-ranking threads: the cap on diversified pages, the candidates a page re-ranks, the
work kept off the event loop, and the deadline, its wait for a thread included.

The threads are held with an event the test sets: the order of what answers is asserted,
never a duration."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from core.settings_api import ApiSettings
from query_api.http.errors import ApiError
from query_api.schemas.search import Page
from query_api.search.reranking import Reranking
from tests.support.waiting import await_until

DEADLINE_S = 30.0  # bounds a hang only


@pytest.fixture
def reranking() -> Iterator[Reranking]:
    rerank = Reranking(1, pool=100, diversity_window=1000, timeout_s=DEADLINE_S, retry_after_s=7)
    try:
        yield rerank
    finally:
        rerank.close()


def test_the_settings_make_the_pool_the_window_and_the_deadline() -> None:
    api = ApiSettings(rerank_threads=3, rerank_pool=200, diversity_window=500, rerank_timeout_s=4)
    rerank = Reranking.of(api)
    try:
        assert (rerank.pool, rerank.diversity_window, rerank.timeout_s) == (200, 500, 4)
        assert rerank.executor._max_workers == 3
    finally:
        rerank.close()


def test_a_diversified_page_past_the_window_is_refused_naming_the_cap(
    reranking: Reranking,
) -> None:
    reranking.check(Page(offset=900, limit=100, diversity=0.5))  # ends at the window: fine
    reranking.check(Page(offset=10_000, limit=100))  # no diversity: no cap
    with pytest.raises(ApiError) as refused:
        reranking.check(Page(offset=10_000, limit=100, diversity=0.5, collapse=False))
    assert refused.value.status == 422
    assert "first 1000 results" in refused.value.message
    assert "PHOTOSEARCH_API__DIVERSITY_WINDOW" in refused.value.message
    assert "offset + limit is 10100" in refused.value.message


def test_a_page_re_ranks_its_depth_or_the_pool_and_a_plain_one_none(
    reranking: Reranking,
) -> None:
    assert reranking.candidates(Page(collapse=False), pooled=False) == 0
    assert reranking.candidates(Page(), pooled=False) == 100  # collapse: the pool
    assert reranking.candidates(Page(collapse=False), pooled=True) == 100  # a fusion
    deep = Page(offset=10_000, limit=100)
    assert reranking.candidates(deep, pooled=False) == 10_101
    # Sorted by date: always the pool, however deep the page.
    assert reranking.candidates(Page(offset=50, sort="newest"), pooled=False) == 100


async def test_the_loop_answers_while_a_re_rank_holds_the_thread(reranking: Reranking) -> None:
    release = threading.Event()
    held = asyncio.ensure_future(reranking.run(lambda: release.wait(DEADLINE_S)))

    async def running() -> bool:
        return reranking.pending == 1

    await await_until(running, DEADLINE_S, "the re-rank running")
    # Other coroutines run to the end on the loop meanwhile: the re-rank is on its thread.
    loop = asyncio.get_running_loop()
    other: asyncio.Future[str] = loop.create_future()
    loop.call_soon(other.set_result, "answered")
    answered = await asyncio.wait_for(other, DEADLINE_S)
    assert (answered, held.done()) == ("answered", False)
    release.set()
    assert await held is True
    assert reranking.pending == 0


async def test_past_the_deadline_a_re_rank_is_a_503_and_one_still_waiting_never_runs() -> None:
    rerank = Reranking(1, pool=100, diversity_window=1000, timeout_s=0.05, retry_after_s=7)
    refused: list[str] = []
    rerank.on_timeout = lambda: refused.append("rerank")
    release = threading.Event()
    ran: list[str] = []
    try:
        holder = rerank.executor.submit(release.wait, DEADLINE_S)
        with pytest.raises(ApiError) as late:
            await rerank.run(lambda: ran.append("late"))
        assert (late.value.status, late.value.code) == (503, "rerank_timeout")
        assert late.value.headers == {"Retry-After": "7"}
        assert refused == ["rerank"]
        release.set()
        holder.result(DEADLINE_S)
        # The thread is free: the next job runs, the one dropped at its deadline never did.
        assert rerank.executor.submit(ran.append, "next").result(DEADLINE_S) is None
        assert ran == ["next"]
    finally:
        release.set()
        rerank.close()
