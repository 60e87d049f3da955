"""The store's calls and the live collection's name, on the in-process store and a test clock;
a stop that lets the background writes in flight end, and cancels them past its bound."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.vectorstore import LIVE_ALIAS, CollectionNotFound, StoreError, VectorStore
from query_api import services as services_module
from query_api.http.errors import Unavailable
from query_api.http.metrics import Metrics
from query_api.services import LiveCollection, Services, StoreCalls, Tasks, stop_background
from tests.unit.query_api.conftest import DEADLINE_S, DIM, LIVE, Clock, api_settings

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


class Write:
    """A background write that blocks until released: what it saw of the stop."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.ended: list[str] = []

    async def __call__(self) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("finished")


async def test_a_stop_lets_a_background_write_in_flight_finish(
    tmp_path: Path, own_store: VectorStore
) -> None:
    services = Services.open(api_settings(tmp_path / "api"), own_store, Metrics())
    write = Write()
    services.later(write())
    await write.started.wait()  # mid-flight
    # Its answer comes while the stop waits for it.
    asyncio.get_running_loop().call_soon(write.release.set)
    await services.close()
    assert write.ended == ["finished"]
    assert services.background == set()


async def test_a_stop_cancels_a_background_write_still_running_at_the_setting_s_bound(
    tmp_path: Path, own_store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = api_settings(tmp_path / "api")
    settings.lifecycle.stop_s = 7.5
    bounds: list[float] = []

    async def bound_passes(tasks: Tasks, timeout_s: float) -> tuple[Tasks, Tasks]:
        """asyncio.wait as if the bound had passed first; the unwinding after, as it is."""
        bounds.append(timeout_s)
        if len(bounds) == 1:
            return set(), set(tasks)
        return await asyncio.wait(tasks, timeout=timeout_s)

    monkeypatch.setattr(services_module, "_wait", bound_passes)
    services = Services.open(settings, own_store, Metrics())
    write = Write()
    services.later(write())
    await write.started.wait()
    await services.close()
    assert bounds == [7.5, 7.5]  # PHOTOSEARCH_LIFECYCLE__STOP_S, then as long to unwind
    assert write.ended == ["cancelled"]
    assert services.background == set()


async def test_nothing_in_flight_is_nothing_to_wait_for() -> None:
    async def never(tasks: Tasks, timeout_s: float) -> tuple[Tasks, Tasks]:
        raise AssertionError("waited with nothing in flight")

    assert await stop_background(set(), 10, wait=never) == set()


async def test_only_what_is_still_running_at_the_bound_is_cancelled() -> None:
    quick, slow = Write(), Write()
    tasks = {asyncio.ensure_future(quick()), asyncio.ensure_future(slow())}
    await asyncio.gather(quick.started.wait(), slow.started.wait())

    async def quick_ends_first(waited: Tasks, timeout_s: float) -> tuple[Tasks, Tasks]:
        quick.release.set()
        return await asyncio.wait(waited, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)

    cancelled = await stop_background(tasks, 10, wait=quick_ends_first)
    assert (quick.ended, slow.ended) == (["finished"], ["cancelled"])
    assert [task.cancelled() for task in cancelled] == [True]
