"""A replica's suggestions refreshed from the session's Redis (popular queries) and Qdrant Edge
(the live collection's words and tags): what a refresh reads, when it rereads the vocabulary,
and that a failed read keeps the index."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis as AsyncRedis

from core.feedback.searchlog import SearchRecord, new_search_id, record_search
from core.feedback.suggestlog import PopularQuery, read_popular
from core.terms import TERMS_FIELD
from core.vectorstore import VectorStore
from query_api.http.metrics import Metrics
from query_api.suggest.index import Suggestion, Vocabulary
from query_api.suggest.suggestions import Suggestions, SuggestMetrics, read_vocabulary
from tests.support.waiting import await_until
from tests.unit.query_api.conftest import LIVE, Clock

RETENTION_S = 30 * 86400
NOW = 2_000_000_000.0


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[AsyncRedis]:
    client = AsyncRedis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def worded(shared_store: VectorStore) -> VectorStore:
    """The module's store, its photos with the words of their titles (as the indexer
    writes)."""
    shared_store.set_payloads(
        LIVE,
        {
            "cat-1": {TERMS_FIELD: ["cat", "sofa"]},
            "cat-2": {TERMS_FIELD: ["cat", "castle"]},
            "dog-1": {TERMS_FIELD: ["dog"]},
            "boat-1": {TERMS_FIELD: ["boat"]},
        },
    )
    return shared_store


class Readers:
    """The refresh's reads over the real Redis and store, counted; `failing` makes the
    queries' read fail as a Redis gone would."""

    def __init__(self, aredis: AsyncRedis, store: VectorStore) -> None:
        self.aredis = aredis
        self.store = store
        self.prefix = f"test-{uuid.uuid4().hex}"
        self.collection = LIVE
        self.vocabulary_reads = 0
        self.failing = False

    async def queries(self) -> list[PopularQuery]:
        if self.failing:
            raise ConnectionError("Redis is gone")
        return await read_popular(
            self.aredis, self.prefix, now=NOW, retention_s=RETENTION_S, limit=100, min_sessions=3
        )

    async def live(self) -> str:
        return self.collection

    async def vocabulary(self, collection: str) -> Vocabulary:
        self.vocabulary_reads += 1
        return read_vocabulary(self.store, collection, 100)

    async def searched(self, query: str, sessions: int) -> None:
        for n in range(sessions):
            record = SearchRecord(
                search_id=new_search_id(),
                query=query,
                collection=LIVE,
                model_version=1,
                shown=["cat-1"],
                session=f"session-{n:08d}",
                at=NOW,
            )
            await record_search(self.aredis, self.prefix, record, RETENTION_S)


@pytest.fixture
def readers(aredis: AsyncRedis, worded: VectorStore) -> Readers:
    return Readers(aredis, worded)


def suggestions(
    readers: Readers, clock: Clock, registry: CollectorRegistry | None = None
) -> Suggestions:
    return Suggestions(
        queries=readers.queries,
        collection=readers.live,
        vocabulary=readers.vocabulary,
        metrics=SuggestMetrics(registry or Metrics().registry),
        refresh_s=3600,
        vocabulary_refresh_s=600,
        now=clock,
    )


async def test_a_refresh_reads_the_popular_queries_and_the_collections_words(
    readers: Readers, clock: Clock
) -> None:
    await readers.searched("cat on a sofa", 3)
    await readers.searched("cat in a hat", 2)  # two sessions only: never suggested
    ready = suggestions(readers, clock)
    assert ready.complete("ca", 8) == []  # nothing before the first refresh
    await ready.refresh()
    assert ready.complete("ca", 8) == [
        Suggestion("cat on a sofa", "query"),
        Suggestion("cat", "tag"),  # two photos; the store's tag "cat" too
        Suggestion("castle", "title"),
    ]


def test_the_vocabulary_holds_the_tags_and_the_words_with_their_photos(
    worded: VectorStore,
) -> None:
    vocabulary = read_vocabulary(worded, LIVE, 100)
    assert dict(vocabulary.tags) == {"cat": 2, "dog": 1, "boat": 1}
    assert dict(vocabulary.terms) == {"cat": 2, "sofa": 1, "castle": 1, "dog": 1, "boat": 1}


async def test_the_vocabulary_is_reread_when_due_or_when_the_live_collection_changes(
    readers: Readers, clock: Clock
) -> None:
    ready = suggestions(readers, clock)
    await ready.refresh()
    built = ready.index
    await ready.refresh()
    assert readers.vocabulary_reads == 1
    assert ready.index is built  # nothing changed: not rebuilt
    clock.now += 601
    await ready.refresh()
    assert readers.vocabulary_reads == 2
    await ready.refresh()
    assert readers.vocabulary_reads == 2
    # A switch to another collection: reread at once (this one is gone: the words stay).
    readers.collection = "photos-m2-gone"
    await ready.refresh()
    assert readers.vocabulary_reads == 3
    assert ready.complete("cas", 8) == [Suggestion("castle", "title")]


async def test_a_failed_read_keeps_what_the_index_had(readers: Readers, clock: Clock) -> None:
    await readers.searched("dog", 3)
    registry = Metrics().registry
    ready = suggestions(readers, clock, registry)
    await ready.refresh()
    readers.failing = True
    await ready.refresh()
    assert ready.complete("do", 8)[0] == Suggestion("dog", "query")
    failed = {"part": "queries", "outcome": "failed"}
    assert registry.get_sample_value("photosearch_suggest_refreshes_total", failed) == 1


async def test_a_requested_refresh_runs_in_the_background_loop(
    readers: Readers, clock: Clock
) -> None:
    ready = suggestions(readers, clock).start()
    try:
        await await_until(lambda: _done(ready, 1), 30, "the first refresh")
        await readers.searched("boat trip", 3)
        ticket = ready.request_refresh()
        await await_until(lambda: _done(ready, ticket), 30, "the requested refresh")
        assert ready.complete("boat t", 8) == [Suggestion("boat trip", "query")]
    finally:
        await ready.stop()


async def _done(ready: Suggestions, ticket: int) -> bool:
    return ready.finished >= ticket


async def test_stop_ends_the_loop_even_when_a_read_loses_the_cancellation(
    readers: Readers, clock: Clock
) -> None:
    """Python 3.11's wait_for can lose a cancellation that arrives as the read it waits on
    finishes: a read that swallows it stands for that. stop() still ends the loop (before
    the flag, an app's shutdown waited for ever)."""
    reading = asyncio.Event()

    async def swallowing(collection: str) -> Vocabulary:
        reading.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            pass  # lost, as wait_for loses it
        return read_vocabulary(readers.store, collection, 100)

    ready = suggestions(readers, clock)
    ready.read_vocabulary = swallowing
    ready.start()
    await reading.wait()
    await ready.stop()
    assert ready.finished == 1
