"""The API's image work (uploads, thumbnails, originals) on threads of its own, bounded.

A few large images must not take the replica down with them: they once took 10 GB and every
search's thread. Here they get their own small pool (searches keep the store's), a bound on
the jobs waiting for it (503 past it, at once), a budget of decoded bytes held at once (a
100-megapixel PNG waits for the room it needs, one too large for all of it is refused), a
deadline (503), and one job per key at a time: concurrent requests for one photo version share
one read and one decode.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

# The ledger is the indexer's too: it lives once, in core (tests import it from here as well).
from core.embedding.budget import ImageWorkTimeout as ImageWorkTimeout
from core.embedding.budget import MemoryBudget as MemoryBudget
from core.embedding.budget import return_freed_pixels
from query_api.http.errors import Unavailable

T = TypeVar("T")


class ImageWork:
    """Runs blocking image jobs off the event loop and off the store's threads."""

    def __init__(
        self, threads: int, queue: int, memory_bytes: int, timeout_s: float, retry_after_s: int
    ) -> None:
        return_freed_pixels()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="image")
        self.budget = MemoryBudget(memory_bytes)
        self.capacity = threads + queue
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.pending = 0  # jobs submitted and not finished (running or waiting), event loop only
        self.started = 0  # jobs ever submitted: what single-flight saves shows here
        self.inflight: dict[str, asyncio.Task[Any]] = {}

    async def single_flight(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        """`make()`, or the answer (or error) of the one already running for `key`."""
        task = self.inflight.get(key)
        if task is None:

            async def call() -> T:
                return await make()

            task = asyncio.get_running_loop().create_task(call())
            self.inflight[key] = task
            task.add_done_callback(lambda _: self.inflight.pop(key, None))
            task.add_done_callback(_retrieve)
        # shield: a caller that gives up must not cancel the work the others wait for.
        return await asyncio.shield(task)

    async def run(self, job: Callable[[Callable[[int], Any]], T]) -> T:
        """`job(reserve)` on an image thread; `reserve(bytes)` is its memory context manager."""
        if self.pending >= self.capacity:
            raise self._busy(f"{self.pending} image jobs are already running or waiting")
        deadline = time.monotonic() + self.timeout_s

        def reserve(amount: int) -> Any:
            return self.budget.hold(amount, deadline)

        def guarded() -> T:
            if time.monotonic() >= deadline:  # waited in the queue past the deadline
                raise ImageWorkTimeout("the image job waited past its deadline")
            return job(reserve)

        future = asyncio.get_running_loop().run_in_executor(self.pool, guarded)
        self.pending += 1
        self.started += 1
        future.add_done_callback(self._finished)
        try:
            # The thread cannot be stopped: past the deadline the caller goes, and the job
            # still counts against the capacity until it ends.
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except (TimeoutError, ImageWorkTimeout):
            raise self._busy(f"the image was not ready within {self.timeout_s:.3g} s") from None

    def _finished(self, future: asyncio.Future[Any]) -> None:
        self.pending -= 1
        _retrieve(future)

    def _busy(self, why: str) -> Unavailable:
        return Unavailable("image_work", f"images are busy: {why}", self.retry_after_s)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a shared job's error as seen: its callers got it, nobody else needs the warning."""
    if not future.cancelled():
        future.exception()
