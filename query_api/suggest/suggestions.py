"""A replica's suggestions: the index a request reads, rebuilt in the background from the
popular queries in the feedback Redis and the live collection's vocabulary, never on a
request's path."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from core.feedback.suggestlog import PopularQuery, read_popular, trim
from core.terms import TERMS_FIELD
from core.vectorstore import CollectionNotFound, StoreError, VectorStore
from query_api.http.errors import Unavailable
from query_api.suggest.index import SuggestIndex, Suggestion, Vocabulary

if TYPE_CHECKING:
    from query_api.services import Services

log = logging.getLogger(__name__)

# A lookup takes microseconds: buckets from 10 us, where the API's start at 1 ms.
_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2)
# Reading 100,000 values of a payload index of 1e8 photos may take seconds on a server.
VOCABULARY_TIMEOUT_S = 120.0


class SuggestMetrics:
    """The suggestions' series, on the app's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lookups = Counter(
            "photosearch_suggest_requests_total",
            "Suggestion lookups, by outcome: found (at least one suggestion) or empty.",
            ["outcome"],
            registry=registry,
        )
        self.lookup_seconds = Histogram(
            "photosearch_suggest_lookup_seconds",
            "Time of one suggestion lookup in the replica's index (the HTTP request's own "
            "time is photosearch_http_request_duration_seconds).",
            buckets=_BUCKETS,
            registry=registry,
        )
        self.entries = Gauge(
            "photosearch_suggest_entries",
            "Entries of the replica's suggestion index, by kind: query, tag, word.",
            ["kind"],
            registry=registry,
        )
        self.refreshes = Counter(
            "photosearch_suggest_refreshes_total",
            "Reads of what suggestions are made of, by part (queries, vocabulary) and outcome "
            "(ok, failed: the index kept what it had).",
            ["part", "outcome"],
            registry=registry,
        )


def read_vocabulary(store: VectorStore, collection: str, limit: int) -> Vocabulary:
    """The tags and words held by the most photos of the collection (blocking). A collection
    of an earlier release has no `terms` index until a sync adds it: its tags only."""
    tags = store.value_counts(collection, "tags", limit=limit)
    try:
        terms = store.value_counts(collection, TERMS_FIELD, limit=limit)
    except StoreError as exc:
        log.warning("suggestions: no words of titles in %s (%s): tags only", collection, exc)
        terms = []
    return Vocabulary(tuple(tags), tuple(terms))


ReadQueries = Callable[[], Awaitable[list[PopularQuery]]]
# The live collection's name, and its vocabulary read by name.
ReadCollection = Callable[[], Awaitable[str]]
ReadVocabulary = Callable[[str], Awaitable[Vocabulary]]


class Suggestions:
    """The index requests read, and its refresh: the popular queries every `refresh_s`, the
    vocabulary every `vocabulary_refresh_s` (by `now`, a monotonic clock) or when the live
    collection changes. A failed read keeps what the index had."""

    def __init__(
        self,
        *,
        queries: ReadQueries,
        collection: ReadCollection,
        vocabulary: ReadVocabulary,
        metrics: SuggestMetrics,
        refresh_s: float,
        vocabulary_refresh_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_queries = queries
        self.read_collection = collection
        self.read_vocabulary = vocabulary
        self.metrics = metrics
        self.refresh_s = refresh_s
        self.vocabulary_refresh_s = vocabulary_refresh_s
        self.now = now
        self.index = SuggestIndex()
        self.queries: list[PopularQuery] = []
        self.vocabulary = Vocabulary()
        self._collection: str | None = None
        self._vocabulary_due = 0.0
        # Refreshes begun and finished: a caller waits for one begun after its request.
        self.started = 0
        self.finished = 0
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def complete(self, q: str, limit: int) -> list[Suggestion]:
        """The index's completions of q; counted and timed."""
        start = time.perf_counter()
        found = self.index.complete(q, limit)
        self.metrics.lookup_seconds.observe(time.perf_counter() - start)
        self.metrics.lookups.labels("found" if found else "empty").inc()
        return found

    async def refresh(self) -> None:
        """Read what changed and swap in a new index."""
        self.started += 1
        begun = self.started
        try:
            read = (self.queries, self.vocabulary)
            await self._read_queries()
            await self._read_vocabulary()
            if (self.queries, self.vocabulary) == read and self.started > 1:
                return  # the same index (a quiet site, or Redis down): no rebuild
            # Building 150,000 entries takes a second of CPU: off the event loop.
            self.index = await asyncio.to_thread(SuggestIndex, self.queries, self.vocabulary)
            words = len(self.index.words)
            for kind, n in (("query", self.index.queries), ("word", words)):
                self.metrics.entries.labels(kind).set(n)
            self.metrics.entries.labels("tag").set(len(self.index.whole) - self.index.queries)
        finally:
            self.finished = begun

    async def _read_queries(self) -> None:
        try:
            self.queries = await self.read_queries()
        except Exception as exc:  # any failure of Redis: the index keeps its queries
            self.metrics.refreshes.labels("queries", "failed").inc()
            log.warning("suggestions: popular queries not read: %r", exc)
            return
        self.metrics.refreshes.labels("queries", "ok").inc()

    async def _read_vocabulary(self) -> None:
        try:
            collection = await self.read_collection()
            if collection == self._collection and self.now() < self._vocabulary_due:
                return
            self.vocabulary = await self.read_vocabulary(collection)
        except (Unavailable, CollectionNotFound, StoreError, OSError, TimeoutError) as exc:
            self.metrics.refreshes.labels("vocabulary", "failed").inc()
            log.warning("suggestions: vocabulary not read: %s", exc)
            return
        self._collection = collection
        self._vocabulary_due = self.now() + self.vocabulary_refresh_s
        self.metrics.refreshes.labels("vocabulary", "ok").inc()

    def request_refresh(self) -> int:
        """Ask the running loop for a refresh now, from any thread; returns the number that
        `finished` reaches once a refresh begun after this call is done."""
        ticket = self.started + 1
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)
        return ticket

    def start(self) -> Suggestions:
        """Refresh in the background (on the running loop) until `stop`."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name="suggestions")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            # Cancelling alone may not end the loop: Python 3.11's wait_for loses a
            # cancellation that arrives as the awaited read finishes (a vocabulary read
            # done on the store's thread), and a lost one left the app's shutdown waiting
            # for ever. The flag ends the loop at its next turn whatever happens to it.
            self._stopping = True
            if self._wake is not None:
                self._wake.set()
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def run(self) -> None:
        """Refresh, then again every refresh_s or when asked, until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not self._stopping:
            try:
                await self.refresh()
            except Exception:  # the loop outlives any one refresh
                log.exception("suggestions: refresh failed")
            if self._stopping:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), self.refresh_s)
            except TimeoutError:
                pass
            self._wake.clear()


def suggestions_of(services: Services, *, now: Callable[[], float] = time.time) -> Suggestions:
    """The replica's suggestions over its clients: the feedback Redis and the store. `now`
    is the wall clock the log's periods are counted by."""
    api = services.settings.api
    redis, prefix = services.feedback, services.settings.redis.prefix
    retention_s = api.feedback_retention_days * 86400

    async def queries() -> list[PopularQuery]:
        # Twice the index's candidates kept in the log, trimmed past four times (any replica).
        at = now()
        await trim(redis, prefix, now=at, retention_s=retention_s, keep=2 * api.suggest_queries)
        return await read_popular(
            redis,
            prefix,
            now=at,
            retention_s=retention_s,
            limit=api.suggest_queries,
            min_sessions=api.suggest_min_sessions,
        )

    async def vocabulary(collection: str) -> Vocabulary:
        loop = asyncio.get_running_loop()
        read = loop.run_in_executor(
            services.store_pool, read_vocabulary, services.store, collection, api.suggest_terms
        )
        return await asyncio.wait_for(read, VOCABULARY_TIMEOUT_S)

    return Suggestions(
        queries=queries,
        collection=services.live_collection,
        vocabulary=vocabulary,
        metrics=SuggestMetrics(services.metrics.registry),
        refresh_s=api.suggest_refresh_s,
        vocabulary_refresh_s=api.suggest_vocabulary_refresh_s,
    )
