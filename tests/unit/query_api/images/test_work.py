"""The API's image work: one job per key at a time, a memory budget that refuses what can
never fit and makes the rest wait their turn, and a bound on the jobs at once."""

from __future__ import annotations

import asyncio
import threading

import pytest

from core.embedding.errors import ImageTooLarge
from query_api.http.errors import Unavailable
from query_api.images.work import ImageWork, ImageWorkTimeout, MemoryBudget

MB = 1024 * 1024
FAR = 1e9  # a deadline on the monotonic clock that no test reaches


def work(threads: int = 2, queue: int = 2) -> ImageWork:
    return ImageWork(threads, queue, memory_bytes=64 * MB, timeout_s=60, retry_after_s=3)


def test_concurrent_requests_for_one_key_share_one_job_and_its_answer() -> None:
    async def scenario() -> None:
        images = work()
        release, both_made, made = asyncio.Event(), asyncio.Event(), 0

        async def make() -> bytes:
            nonlocal made
            made += 1
            if made == 2:
                both_made.set()
            await release.wait()
            return b"pixels"

        calls = [asyncio.create_task(images.single_flight("p1:v1", make)) for _ in range(5)]
        other = asyncio.create_task(images.single_flight("p2:v1", make))
        await both_made.wait()  # both keys' jobs started; the other calls joined them
        assert len(images.inflight) == 2
        release.set()
        assert await asyncio.gather(*calls, other) == [b"pixels"] * 6
        assert made == 2 and images.inflight == {}
        # Finished work is not cached here: the next request for the key makes it again.
        assert await images.single_flight("p1:v1", make) == b"pixels" and made == 3
        images.close()

    asyncio.run(scenario())


def test_a_shared_job_s_error_reaches_every_caller() -> None:
    async def scenario() -> None:
        images = work()

        async def fail() -> bytes:
            raise ValueError("unreadable")

        results = await asyncio.gather(
            *(images.single_flight("k", fail) for _ in range(3)), return_exceptions=True
        )
        assert [str(r) for r in results] == ["unreadable"] * 3
        images.close()

    asyncio.run(scenario())


def test_past_its_capacity_a_job_is_refused_at_once_with_retry_after() -> None:
    async def scenario() -> None:
        images = work(threads=1, queue=0)
        running, release = threading.Event(), threading.Event()

        def hold(_reserve: object) -> str:
            running.set()
            release.wait(60)
            return "done"

        first = asyncio.create_task(images.run(hold))
        await asyncio.to_thread(running.wait, 60)
        with pytest.raises(Unavailable) as refused:
            await images.run(hold)
        assert (refused.value.status, refused.value.headers) == (503, {"Retry-After": "3"})
        assert "already running" in str(refused.value)
        release.set()
        assert await first == "done" and images.pending == 0 and images.started == 1
        images.close()

    asyncio.run(scenario())


def test_the_memory_budget_refuses_what_never_fits_and_queues_the_rest() -> None:
    budget = MemoryBudget(10 * MB)
    with pytest.raises(ImageTooLarge, match="more than the 10 MB"):
        with budget.hold(11 * MB, deadline=FAR):
            pass
    held, waited = threading.Event(), threading.Event()
    with budget.hold(8 * MB, deadline=FAR):
        # No room now, and the deadline is already past: refused, not waiting.
        with pytest.raises(ImageWorkTimeout):
            with budget.hold(4 * MB, deadline=0.0):
                pass

        def second() -> None:
            with budget.hold(4 * MB, deadline=FAR):
                held.set()
            waited.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not held.is_set() and budget.free == 2 * MB
    thread.join(60)
    assert held.is_set() and waited.is_set()
    assert budget.free == 10 * MB and budget.peak_held == 8 * MB
