"""Room on the embedded store's disk: writes are refused while it runs low, never half-done.

Qdrant Edge writes its segments and write-ahead log through mmap. A page written into a full
filesystem is not an error the engine can return: the kernel sends SIGBUS and the process dies
(seen with a full tmpfs as the data directory), taking the API or the worker with it. So the
store keeps a reserve: below it, every write is refused with `StoreFull`, which the indexer
retries like any outage of its store, and the data already written stays as it was.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.vectorstore.base import StoreError

MB = 1 << 20


class StoreFull(StoreError):
    """The store's disk has less free space than its reserve; the message says how much."""


def folder_bytes(folder: Path) -> int:
    """Space the files under a folder take on disk (allocated blocks, not apparent sizes)."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:  # a segment replaced while we walked
                continue
    return total


@dataclass(frozen=True)
class DiskReserve:
    """Free space the store keeps on the filesystem of `path`."""

    path: Path
    reserve_bytes: int

    def check(self, what: str, needs_bytes: int = 0) -> None:
        """Raise StoreFull unless `needs_bytes` fit above the reserve."""
        free = shutil.disk_usage(self.path).free
        if free - needs_bytes >= self.reserve_bytes:
            return
        need = f" and {needs_bytes / MB:.0f} MB for this {what}" if needs_bytes else ""
        raise StoreFull(
            f"No space left on device for the vector store: {self.path} has "
            f"{free / MB:.1f} MB free, below the {self.reserve_bytes / MB:.0f} MB reserve{need};"
            f" {what} refused, nothing written. Free some space: the indexer retries."
        )
