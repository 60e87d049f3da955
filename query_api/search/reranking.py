"""The replica's re-ranking threads: CPU-heavy ranking (maximal marginal relevance, the
collapse and date order of large pools) off the event loop, on a bounded pool, each search's
within a deadline; the cap on diversified pages and how many candidates a page re-ranks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from core.settings_api import ApiSettings
from query_api.http.errors import ApiError
from query_api.schemas.search import Page
from query_api.search.boosts import Boosts

T = TypeVar("T")


class Reranking:
    """The replica's re-ranking: its pool size, the cap on diversified pages, and the threads
    that do the CPU work (a bounded pool), each search's within a deadline.

    The work must stay off the event loop: one maximal-marginal-relevance pass over 10,000
    candidates once held it for 7.5 s, and every other caller (`/healthz` too) waited.
    """

    # The replica's boosts (Services sets them from its settings; tests pin their clock). A
    # boosted ranking is a pool re-scored by the store's formula (query_api/search/boosts.py).
    boosts: Boosts = Boosts()

    def __init__(
        self,
        threads: int,
        *,
        pool: int,
        diversity_window: int,
        timeout_s: float,
        retry_after_s: int,
        on_timeout: Callable[[], None] = lambda: None,
        facet_pool: int = 1000,
    ) -> None:
        self.pool = pool
        # The candidates facet counts are counted over (query_api/search/facets.py).
        self.facet_pool = facet_pool
        self.diversity_window = diversity_window
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.on_timeout = on_timeout
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="rerank")
        self._jobs: set[Future[Any]] = set()

    @classmethod
    def of(cls, api: ApiSettings, on_timeout: Callable[[], None] = lambda: None) -> Reranking:
        return cls(
            api.rerank_threads,
            pool=api.rerank_pool,
            diversity_window=api.diversity_window,
            timeout_s=api.rerank_timeout_s,
            retry_after_s=api.retry_after_s,
            on_timeout=on_timeout,
            facet_pool=api.facet_pool,
        )

    @property
    def pending(self) -> int:
        """Jobs given to the threads and not finished: running or waiting for a thread."""
        return sum(not job.done() for job in list(self._jobs))

    def check(self, page: Page) -> None:
        """422 for a page this replica does not diversify: past the window MMR re-ranks."""
        end = page.offset + page.limit
        if page.diversity > 0 and end > self.diversity_window:
            raise ApiError(
                422,
                f"diversity re-ranks the first {self.diversity_window} results at most "
                f"(PHOTOSEARCH_API__DIVERSITY_WINDOW); offset + limit is {end}: "
                "ask for an earlier page, or diversity=0",
            )

    def candidates(self, page: Page, *, pooled: bool) -> int:
        """How many candidates a search of this page re-ranks at first (0: none, the store
        pages it); a collapsed page short of groups reads up to 4x as many. A boosted
        page is a pool re-scored by the formula, as a fusion is one."""
        if not (pooled or page.rearranged() or self.boosts.active(page)):
            return 0
        need = page.offset + page.limit + 1
        return self.pool if page.sort == "newest" else max(need, self.pool)

    async def run(self, call: Callable[[], T]) -> T:
        """`call` on a ranking thread, within the deadline (its wait for a thread included);
        past it 503 with Retry-After, and the job is dropped if it has not started."""
        job = self.executor.submit(call)
        self._jobs = {j for j in self._jobs if not j.done()} | {job}
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job), self.timeout_s)
        except TimeoutError:
            job.cancel()
            self.on_timeout()
            raise ApiError(
                503,
                f"this replica did not re-rank the search within {self.timeout_s:g} s (it is "
                f"busy re-ranking others): try again in {self.retry_after_s} s",
                code="rerank_timeout",
                headers={"Retry-After": str(self.retry_after_s)},
            ) from None

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
