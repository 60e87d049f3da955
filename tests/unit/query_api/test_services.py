"""The store's calls and the live collection's name, on the in-process store and a test clock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.vectorstore import LIVE_ALIAS, CollectionNotFound, StoreError, VectorStore
from query_api.http.errors import Unavailable
from query_api.http.metrics import Metrics
from query_api.services import LiveCollection, StoreCalls
from tests.unit.query_api.conftest import DEADLINE_S, DIM, LIVE, Clock

OTHER = "photos-m2-b"


async def test_the_live_name_is_reused_until_it_has_aged_then_asked_again(
    own_store: VectorStore, own_live: LiveCollection, clock: Clock
) -> None:
    live = own_live
    assert await live.name() == LIVE
    own_store.create_collection(OTHER, DIM)
    own_store.set_aliases({LIVE_ALIAS: OTHER})
    clock.now += 4.9
    assert await live.name() == LIVE  # within alias_cache_s (5 s): not asked
    assert await live.name(fresh=True) == OTHER  # a search that found its name gone asks
    own_store.set_aliases({LIVE_ALIAS: LIVE})
    clock.now += 5.0
    assert await live.name() == LIVE


async def test_without_a_live_collection_a_search_is_told_to_run_a_sync(
    own_store: VectorStore, own_live: LiveCollection
) -> None:
    own_store.set_aliases({LIVE_ALIAS: None})
    with pytest.raises(Unavailable) as unavailable:
        await own_live.name()
    assert unavailable.value.status == 503
    assert "run a sync" in str(unavailable.value)
    assert unavailable.value.headers == {"Retry-After": "7"}


async def test_a_failed_store_call_is_a_503_counted_by_operation(
    calls: StoreCalls, metrics: Metrics
) -> None:
    def fail() -> None:
        raise StoreError("disk on fire")

    with pytest.raises(Unavailable) as unavailable:
        await calls.run("retrieve", fail)
    assert str(unavailable.value) == "the vector store failed (retrieve): disk on fire"
    assert (
        metrics.registry.get_sample_value(
            "photosearch_vector_store_errors_total", {"operation": "retrieve"}
        )
        == 1
    )


async def test_a_missing_collection_passes_through_for_the_caller_to_decide(
    calls: StoreCalls,
) -> None:
    with pytest.raises(CollectionNotFound):
        await calls.run("search:text", lambda: calls.store.count("photos-m9-gone"))


async def test_a_store_call_past_its_deadline_is_a_503(
    store: VectorStore, metrics: Metrics
) -> None:
    release = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        calls = StoreCalls(store, pool, timeout_s=0.001, retry_after_s=3, metrics=metrics)
        try:
            with pytest.raises(Unavailable) as late:
                await calls.run("resolve", lambda: release.wait(DEADLINE_S))
        finally:
            release.set()
    assert str(late.value) == "the vector store did not answer resolve within 0.001 s"
