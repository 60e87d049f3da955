"""The ledger of decoded image memory: what the decodes of one process may hold at once.

Decoding is where a photo's few compressed kilobytes become hundreds of megabytes (a
10950x10950 PNG of 142 KB takes 480 MB), so every decode reserves its estimate
(core/embedding/images.py, `decoded_bytes`) here first: the API's image threads
(query_api/images/work.py) and the indexer's reader threads each hold one such budget per
process. A decode that needs more than the whole budget is refused at once (ImageTooLarge, the
photo's reason); the others wait for room, the API's until its deadline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from core.embedding.errors import ImageTooLarge

MB = 1024 * 1024
# glibc's M_MMAP_THRESHOLD: allocations from this size up are mapped apart and unmapped when
# freed. Left dynamic, glibc raises it after the first big free, and the pixels of a decode
# (Pillow allocates them in 16 MB blocks) then stay in the thread's arena: two image threads
# decoding 100-megapixel PNGs in turn took the process to 982 MB with a 512 MB budget (one
# thread's freed pixels, the other's new ones). Fixed at 4 MB, RSS follows the budget.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 4 * MB

# What a decode takes: `reserve(bytes)` is a context manager held around it.
Reserve = Callable[[int], AbstractContextManager[object]]


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
    """Bytes that the decoding threads of a process may hold at once; a thread waits for its
    share. `peak_held` is the most ever held, the figure a test or a benchmark reads."""

    def __init__(self, total_bytes: int, holder: str = "the server") -> None:
        self.total = total_bytes
        self.free = total_bytes
        self.peak_held = 0
        self.holder = holder  # who gives the budget, for the refusal's message
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, amount: int, deadline: float | None = None) -> Iterator[None]:
        """Hold `amount` bytes, waiting for room until `deadline` (time.monotonic(); None:
        until another decode ends, which each does)."""
        if amount > self.total:
            raise ImageTooLarge(
                f"decoding this image takes about {-(-amount // MB)} MB, more than the "
                f"{self.total // MB} MB {self.holder} gives one image"
            )
        with self._changed:
            while self.free < amount:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
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

    def reserve(self, amount: int) -> AbstractContextManager[None]:
        """`hold` with no deadline: a Reserve for callers that wait as long as it takes."""
        return self.hold(amount)
