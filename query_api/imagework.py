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
import ctypes
import ctypes.util
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from core.embedding.errors import ImageTooLarge
from query_api.errors import Unavailable

T = TypeVar("T")

_MB = 1024 * 1024
# glibc's M_MMAP_THRESHOLD: allocations from this size up are mapped apart and unmapped when
# freed. Left dynamic, glibc raises it after the first big free, and the pixels of a decode
# (Pillow allocates them in 16 MB blocks) then stay in the thread's arena: two image threads
# decoding 100-megapixel PNGs in turn took the process to 982 MB with a 512 MB budget (one
# thread's freed pixels, the other's new ones). Fixed at 4 MB, RSS follows the budget.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 4 * _MB


def return_freed_pixels() -> None:
    """Have large allocations unmapped on free, for the whole process (glibc only)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError, TypeError):
        pass  # not glibc: its allocator decides


class ImageWorkTimeout(TimeoutError):
    """The job did not get its memory, or did not finish, within the deadline."""


class MemoryBudget:
    """Bytes that the image threads may hold at once; a thread waits for its share."""

    def __init__(self, total_bytes: int) -> None:
        self.total = total_bytes
        self.free = total_bytes
        self.peak_held = 0
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, amount: int, deadline: float) -> Iterator[None]:
        if amount > self.total:
            raise ImageTooLarge(
                f"decoding this image takes about {amount // _MB} MB, more than the "
                f"{self.total // _MB} MB the server gives one image"
            )
        with self._changed:
            while self.free < amount:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ImageWorkTimeout("no room to decode the image before the deadline")
                self._changed.wait(remaining)
            self.free -= amount
            self.peak_held = max(self.peak_held, self.total - self.free)
        try:
            yield
        finally:
            with self._changed:
                self.free += amount
                self._changed.notify_all()


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
