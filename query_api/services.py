"""The clients a replica holds (created in the lifespan), with the deadlines every call keeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.asyncio import Redis as AsyncRedis

from core.embedding.client import EmbeddingClient
from core.embedding.images import ImageLimits
from core.embedding.manifest import Priority
from core.feedback.events import Credit, no_credit
from core.feedback.searchlog import SearchLog
from core.jobs import Jobs
from core.querycache import QueryCache
from core.redisguard import RedisGuard
from core.settings import Settings
from core.taskqueue import TaskApp, create_celery
from core.vectorstore import (
    LIVE_ALIAS,
    CollectionNotFound,
    StoreError,
    VectorStore,
    open_store,
)
from query_api.http.admission import Admission
from query_api.http.auth import KeyRing
from query_api.http.errors import Unavailable
from query_api.http.metrics import Metrics
from query_api.http.ratelimit import RateLimits, TokenBuckets
from query_api.images.fetch import ImageFetcher
from query_api.images.work import ImageWork
from query_api.search.boosts import Boosts
from query_api.search.embed import QueryEmbedder
from query_api.search.experiment import AutoSwitch, ExperimentMetrics, Experiments
from query_api.search.reranking import Reranking

T = TypeVar("T")


@dataclass
class Services:
    """Everything a request needs; one per app, on `app.state.services`."""

    settings: Settings
    store: VectorStore
    embedder: EmbeddingClient
    redis: AsyncRedis
    cache: QueryCache
    jobs: Jobs
    # Sends the admin routes' tasks by name to the queues the workers consume.
    tasks: TaskApp
    metrics: Metrics
    keys: KeyRing
    limits: RateLimits
    store_pool: ThreadPoolExecutor
    images: ImageWork
    admission: Admission
    # The threads that re-rank pools (diversity, large collapses) off the event loop.
    reranking: Reranking
    # Fetches the images of searches by URL (an HTTP client, closed with the rest).
    fetcher: ImageFetcher
    # The persistent Redis (PHOTOSEARCH_REDIS__URL) of the search log and the events on it.
    feedback: AsyncRedis
    own_store: bool
    # Query counts, written after the answer leaves; held here so none is garbage-collected.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    # Runs on each search's accepted events: an interleaved experiment credits its sides.
    credit: Credit = no_credit
    # The parts a search takes, made of the clients above in __post_init__: the store's calls
    # on store_pool, the live collection's name, and text queries' embeddings.
    calls: StoreCalls = field(init=False)
    live: LiveCollection = field(init=False)
    queries: QueryEmbedder = field(init=False)
    searchlog: SearchLog = field(init=False)
    # The running interleaved experiment, which credits the clicks on its searches.
    experiments: Experiments = field(init=False)

    def __post_init__(self) -> None:
        api = self.settings.api
        self.reranking.boosts = Boosts.of(api)
        self.calls = StoreCalls(
            self.store,
            self.store_pool,
            timeout_s=api.search_timeout_s,
            retry_after_s=api.retry_after_s,
            metrics=self.metrics,
        )
        self.live = LiveCollection(self.calls, alias_cache_s=api.alias_cache_s)
        self.queries = QueryEmbedder(
            self.embedder,
            self.cache,
            self.admission,
            self.metrics,
            timeout_s=api.embed_timeout_s,
            later=self.later,
        )
        metrics = self.metrics
        self.searchlog = SearchLog(
            self.feedback,
            self.settings.redis.prefix,
            retention_s=api.feedback_retention_days * 86400,
            guard=RedisGuard(
                api.redis_timeout_s,
                api.redis_retry_s,
                lambda op: metrics.cache_errors.labels(op).inc(),
            ),
        )
        self.experiments = Experiments(
            self.jobs.redis,
            self.settings.redis.prefix,
            ExperimentMetrics(metrics.registry),
            job=self.jobs.get,
            cache_s=api.alias_cache_s,
            auto=AutoSwitch(
                api.experiment_auto_switch, api.experiment_alpha, api.experiment_min_impressions
            ),
        )
        self.credit = self.experiments.credit

    @classmethod
    def open(cls, settings: Settings, store: VectorStore | None, metrics: Metrics) -> Services:
        api = settings.api
        redis = AsyncRedis.from_url(
            settings.redis.cache,
            socket_timeout=api.redis_timeout_s,
            socket_connect_timeout=api.redis_timeout_s,
        )
        cache = QueryCache(
            redis,
            settings.redis.prefix,
            ttl_s=api.cache_ttl_s,
            timeout_s=api.redis_timeout_s,
            retry_s=api.redis_retry_s,
            popular_days=api.popular_days,
            on_error=lambda op: metrics.cache_errors.labels(op).inc(),
        )
        # Someone waits for every search: Triton serves them ahead of the indexer's batches.
        embedder = EmbeddingClient.from_settings(
            settings,
            image_limits=ImageLimits(api.max_upload_pixels, api.max_upload_bytes),
            priority=Priority.SEARCH,
        )
        # Admin calls are rare and blocking: a plain client, used from the thread pool.
        jobs = Jobs.from_settings(settings, socket_timeout=5, socket_connect_timeout=5)
        return cls(
            settings=settings,
            store=store if store is not None else open_store(settings),
            embedder=embedder,
            redis=redis,
            cache=cache,
            jobs=jobs,
            tasks=create_celery(settings),
            metrics=metrics,
            keys=KeyRing(api.keys, api.anonymous_search),
            # On the cache's Redis and its guard: one failure, and both skip Redis a while.
            limits=RateLimits(
                TokenBuckets(redis, settings.redis.prefix, cache.guard), api, metrics
            ),
            store_pool=ThreadPoolExecutor(api.store_threads, thread_name_prefix="store"),
            images=ImageWork(
                api.image_threads,
                api.image_queue,
                api.image_memory_mb * 1024 * 1024,
                api.image_timeout_s,
                api.retry_after_s,
            ),
            admission=Admission(
                api.max_embeds_in_flight,
                api.admission_wait_ms / 1000,
                api.overload_retry_after_s,
                lambda kind: metrics.refused.labels(kind).inc(),
            ),
            reranking=Reranking.of(api, lambda: metrics.refused.labels("rerank").inc()),
            fetcher=ImageFetcher.from_settings(
                api, lambda outcome: metrics.image_url_fetches.labels(outcome).inc()
            ),
            feedback=AsyncRedis.from_url(
                settings.redis.url,
                socket_timeout=api.redis_timeout_s,
                socket_connect_timeout=api.redis_timeout_s,
            ),
            own_store=store is None,
        )

    def later(self, work: Coroutine[Any, Any, None]) -> None:
        """Run a Redis write off the answer's path; it keeps its own deadline, never raises."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def close(self) -> None:
        await stop_background(self.background, self.settings.lifecycle.stop_s)
        await self.embedder.close()
        await self.fetcher.aclose()
        await self.redis.aclose()
        await self.feedback.aclose()
        self.jobs.redis.close()
        self.tasks.close()
        self.store_pool.shutdown(wait=True, cancel_futures=True)
        self.images.close()
        self.reranking.close()
        if self.own_store:
            self.store.close()

    async def in_store(self, operation: str, call: Callable[[], T]) -> T:
        """`StoreCalls.run` on this replica's store threads."""
        return await self.calls.run(operation, call)

    async def live_collection(self, fresh: bool = False) -> str:
        """`LiveCollection.name`: the collection searches read now."""
        return await self.live.name(fresh)


Tasks = set[asyncio.Task[None]]


async def _wait(tasks: Tasks, timeout_s: float) -> tuple[Tasks, Tasks]:
    return await asyncio.wait(tasks, timeout=timeout_s)


async def stop_background(
    tasks: Tasks,
    within_s: float,
    *,
    wait: Callable[[Tasks, float], Awaitable[tuple[Tasks, Tasks]]] | None = None,
) -> Tasks:
    """Let the tasks in flight end for up to `within_s` (PHOTOSEARCH_LIFECYCLE__STOP_S), then
    cancel the others and let them unwind, as long again at most (one that swallows its
    cancellation is not waited on for ever); the ones cancelled.

    Args:
        tasks: the background tasks (a copy is waited on: theirs leave the set as they end).
        within_s: the bound.
        wait: asyncio.wait's (done, pending), given the tasks and the bound.
    """
    if not tasks:
        return set()
    wait = wait or _wait
    _, pending = await wait(set(tasks), within_s)
    for task in pending:
        task.cancel()
    if pending:
        await wait(pending, within_s)
    return pending


class StoreCalls:
    """Blocking calls of one vector store, run on the store's threads within the search
    deadline. CollectionNotFound passes through (the caller decides); other store failures
    and a missed deadline become 503 with Retry-After."""

    def __init__(
        self,
        store: VectorStore,
        pool: Executor,
        *,
        timeout_s: float,
        retry_after_s: int,
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.pool = pool
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.metrics = metrics

    async def run(self, operation: str, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        timeout = self.timeout_s
        start = time.perf_counter()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.pool, call), timeout)
        except CollectionNotFound:
            raise
        except (TimeoutError, StoreError, OSError) as exc:
            self.metrics.store_errors.labels(operation).inc()
            reason = (
                f"did not answer {operation} within {timeout:.3g} s"
                if isinstance(exc, TimeoutError)
                else f"failed ({operation}): {exc}"
            )
            raise Unavailable(
                "vector_store", f"the vector store {reason}", self.retry_after_s
            ) from None
        finally:
            if operation.startswith("search"):
                self.metrics.search_seconds.labels(operation.removeprefix("search:")).observe(
                    time.perf_counter() - start
                )


class LiveCollection:
    """The name of the collection searches read now; it carries the model version to embed
    with.

    The name is reused for `alias_cache_s` (by `now`, a monotonic clock), unless `fresh`:
    asking the store on every search costs a thread hop (and two HTTP calls to a Qdrant
    server). Reusing it stays version-safe: a search embeds with the version its collection's
    name carries, and a switch leaves the previous collection in place for a rollback; `fresh`
    is for a search that found the name gone.
    """

    def __init__(
        self,
        calls: StoreCalls,
        *,
        alias_cache_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.calls = calls
        self.alias_cache_s = alias_cache_s
        self.now = now
        self._named: tuple[str, float] | None = None

    async def name(self, fresh: bool = False) -> str:
        now = self.now()
        if not fresh and self._named is not None and now < self._named[1]:
            return self._named[0]
        store = self.calls.store
        try:
            name = await self.calls.run("resolve", lambda: store.resolve(LIVE_ALIAS))
        except CollectionNotFound:
            raise Unavailable(
                "vector_store",
                "nothing is indexed yet: there is no live collection (run a sync)",
                self.calls.retry_after_s,
            ) from None
        self._named = (name, now + self.alias_cache_s)
        return name
