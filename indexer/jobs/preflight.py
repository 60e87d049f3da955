"""A reindex's pre-flight check: refused before it starts when the store cannot hold the new
collection beside the ones it holds, by the capacity model (core/vectorstore/footprint.py).

A 1e8 reindex that runs out of memory or disk fails hours into its load, or takes the live
collection down with it (Qdrant Edge dies of SIGBUS on a full disk, a server node of OOM). The
new collection is taken to be as large as the live one: the reindex reads the same catalogue.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from core.settings import QdrantSettings
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore
from core.vectorstore.diskspace import MB, folder_bytes
from core.vectorstore.footprint import (
    Footprint,
    GiB,
    Layout,
    MiB,
    during_build,
    footprint,
    layout_of,
)
from core.vectorstore.schema import Tier
from indexer.jobs.sync import IndexerError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Capacity:
    """What the store has free for a new collection (None: unknown), and where that comes from."""

    memory_bytes: float | None
    disk_bytes: float | None
    source: str


def capacity_of(settings: QdrantSettings, held: Sequence[Footprint]) -> Capacity:
    """Qdrant Edge: the machine's free memory (psutil) and its folder's free disk above the
    store's reserve, each at most what the settings leave beside what it holds. A server: the
    settings' memory and disk less the model of the collections it holds (0: unknown)."""
    settings_memory = settings.memory_gib * GiB
    settings_disk = settings.disk_gib * GiB
    held_memory = sum(f.memory_bytes for f in held)
    if settings.url is None:
        assert settings.path is not None  # filled by Settings._derive_paths
        memory = float(psutil.virtual_memory().available)
        disk = float(shutil.disk_usage(_existing(settings.path)).free - settings.min_free_mb * MB)
        if settings_memory:
            memory = min(memory, settings_memory - held_memory)
        if settings_disk:
            disk = min(disk, settings_disk - folder_bytes(settings.path))
        return Capacity(
            max(memory, 0.0),
            max(disk, 0.0),
            f"free memory (psutil) and free disk under {settings.path}",
        )
    held_disk = sum(f.disk_bytes for f in held)
    return Capacity(
        max(settings_memory - held_memory, 0.0) if settings_memory else None,
        max(settings_disk - held_disk, 0.0) if settings_disk else None,
        "PHOTOSEARCH_QDRANT__MEMORY_GIB and DISK_GIB, less the model of the collections held",
    )


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@dataclass(frozen=True)
class Room:
    """A reindex's needs against the capacity; short_* > 0 where it does not fit."""

    photos: int
    memory_bytes: float
    disk_bytes: float
    capacity: Capacity
    # The memory by tier: pinned and cached parts whole (what memory_bytes counts), and the
    # page cache of the cold parts at their resident share (not counted: evictable).
    memory_by_tier: dict[Tier, float] = field(default_factory=dict)

    @property
    def short_memory(self) -> float:
        free = self.capacity.memory_bytes
        return 0.0 if free is None else max(self.memory_bytes - free, 0.0)

    @property
    def short_disk(self) -> float:
        free = self.capacity.disk_bytes
        return 0.0 if free is None else max(self.disk_bytes - free, 0.0)

    def fits(self) -> bool:
        return not (self.short_memory or self.short_disk)

    def skipped(self) -> list[str]:
        """What the check could not compare, and why: for the job's problems."""
        return [
            f"pre-flight check of {what} skipped: PHOTOSEARCH_QDRANT__{what.upper()}_GIB is 0 "
            f"(the Qdrant cluster's {what} is unknown); the new collection needs about "
            f"{size(need)} of it"
            for what, free, need in (
                ("memory", self.capacity.memory_bytes, self.memory_bytes),
                ("disk", self.capacity.disk_bytes, self.disk_bytes),
            )
            if free is None
        ]

    def message(self) -> str:
        free = self.capacity
        short = [
            f"{size(n)} of {what}"
            for what, n in (("memory", self.short_memory), ("disk", self.short_disk))
            if n
        ]
        by = self.memory_by_tier
        tiers = (
            f"{size(by.get(Tier.PINNED, 0.0))} pinned, {size(by.get(Tier.CACHED, 0.0))} cached;"
            f" cold parts on disk, {size(by.get(Tier.COLD, 0.0))} of their pages in the page "
            "cache after searches"
        )
        return (
            f"needs {size(self.memory_bytes)} of memory ({tiers}) and "
            f"{size(self.disk_bytes)} of disk "
            f"for {self.photos:,} photos beside the collections the store holds; the store has "
            f"{size(free.memory_bytes)} of memory and {size(free.disk_bytes)} of disk free "
            f"({free.source}): " + (f"short by {' and '.join(short)}" if short else "it fits")
        )


def size(n: float | None) -> str:
    """Bytes in GiB, or MiB below one GiB (a store made small on purpose)."""
    if n is None:
        return "unknown"
    return f"{n / GiB:,.1f} GiB" if n >= GiB else f"{n / MiB:,.1f} MiB"


def room_for(photos: int, dim: int, layout: Layout, capacity: Capacity) -> Room:
    """What a new collection of `photos` photos of `dim` dimensions needs, its index build
    included, against what the store has free beside the collections it holds."""
    need = during_build(footprint(photos, dim, layout), layout)
    tiers = {tier: need.memory_of(tier) for tier in Tier}
    return Room(photos, need.memory_bytes, need.disk_bytes, capacity, tiers)


def check_reindex(
    store: VectorStore, collection: str, dim: int, settings: QdrantSettings
) -> list[str]:
    """Raise IndexerError unless the store can hold `collection` (the reindex's, which a retried
    start may have created already) beside every other collection it holds; returns what the
    check skipped, for the job's problems."""
    held = [c for c in store.collections() if c.name != collection]
    try:
        live = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        live = None
    photos = next((c.points for c in held if c.name == live), 0)
    layout = layout_of(settings)
    models = [footprint(c.points, c.dim, layout) for c in held]
    room = room_for(photos, dim, layout, capacity_of(settings, models))
    if not room.fits():
        raise IndexerError(f"reindex refused before it started: {room.message()}")
    log.info("reindex pre-flight check passed: %s", room.message())
    return room.skipped()
