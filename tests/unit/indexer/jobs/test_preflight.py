"""A reindex's pre-flight check on the in-process stores: refused, with the figures, when the
store made small on purpose cannot hold the new collection beside the live one; passed when it
can; skipped, and said so, where a server's capacity is not set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.settings import QdrantSettings, Settings
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore, collection_name, open_store
from core.vectorstore.diskspace import folder_bytes
from core.vectorstore.footprint import GiB, during_build, footprint, layout_of
from core.vectorstore.schema import Tier
from indexer.jobs.preflight import check_reindex, size
from indexer.jobs.sync import IndexerError

DIM = 16
PHOTOS = 300
LIVE = collection_name(1, "live")
NEW = collection_name(2, "new")


def store_with_live(settings: Settings) -> VectorStore:
    store = open_store(settings)
    store.create_collection(LIVE, DIM)
    vectors = np.random.default_rng(0).normal(size=(PHOTOS, DIM)).astype(np.float32)
    store.upsert(LIVE, [PhotoPoint(f"p{i:03d}", v, {}) for i, v in enumerate(vectors)])
    store.set_aliases({LIVE_ALIAS: LIVE})
    return store


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[tuple[Settings, VectorStore]]:
    settings = Settings(data_dir=tmp_path)
    store = store_with_live(settings)
    yield settings, store
    store.close()


def need(settings: QdrantSettings) -> tuple[float, float]:
    """The new collection's memory and disk by the model, its index build included."""
    layout = layout_of(settings)
    model = during_build(footprint(PHOTOS, DIM, layout), layout)
    return model.memory_bytes, model.disk_bytes


def test_a_store_too_small_refuses_the_reindex_and_says_by_how_much(
    edge: tuple[Settings, VectorStore],
) -> None:
    settings, store = edge
    assert settings.qdrant.path is not None
    held = folder_bytes(settings.qdrant.path)
    # Made small on purpose: room for what it holds and a tenth of what the reindex needs.
    _, disk = need(settings.qdrant)
    small = settings.qdrant.model_copy(update={"disk_gib": (held + disk / 10) / GiB})

    with pytest.raises(IndexerError) as refused:
        check_reindex(store, NEW, DIM, small)

    message = str(refused.value)
    assert message.startswith("reindex refused before it started: needs ")
    assert f"{size(disk)} of disk for {PHOTOS} photos beside the collections" in message
    short = disk - (small.disk_gib * GiB - held)
    assert message.endswith(f"short by {size(short)} of disk"), message
    assert not store.has_collection(NEW)


def test_a_store_with_room_passes_and_a_retried_start_counts_its_collection_once(
    edge: tuple[Settings, VectorStore],
) -> None:
    settings, store = edge
    assert check_reindex(store, NEW, DIM, settings.qdrant) == []
    # A retried start finds its own collection created: not counted as held besides.
    store.create_collection(NEW, DIM)
    assert settings.qdrant.path is not None
    held = folder_bytes(settings.qdrant.path)
    _, disk = need(settings.qdrant)
    just = settings.qdrant.model_copy(update={"disk_gib": (held + disk * 1.01) / GiB})
    assert check_reindex(store, NEW, DIM, just) == []


def test_a_server_of_unknown_size_skips_the_check_and_says_why(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=":memory:"))
    store = store_with_live(settings)
    try:
        memory, disk = need(settings.qdrant)
        skipped = check_reindex(store, NEW, DIM, settings.qdrant)
        assert skipped == [
            "pre-flight check of memory skipped: PHOTOSEARCH_QDRANT__MEMORY_GIB is 0 (the "
            f"Qdrant cluster's memory is unknown); the new collection needs about {size(memory)}"
            " of it",
            "pre-flight check of disk skipped: PHOTOSEARCH_QDRANT__DISK_GIB is 0 (the Qdrant "
            f"cluster's disk is unknown); the new collection needs about {size(disk)} of it",
        ]

        # A cluster of known size: the live collection's model is what it holds already.
        layout = layout_of(settings.qdrant)
        live = footprint(PHOTOS, DIM, layout)
        cluster = settings.qdrant.model_copy(
            update={
                "memory_gib": (live.memory_bytes + memory * 2) / GiB,
                "disk_gib": (live.disk_bytes + disk / 2) / GiB,
            }
        )
        with pytest.raises(IndexerError, match=f"short by {size(disk / 2)} of disk$"):
            check_reindex(store, NEW, DIM, cluster)
    finally:
        store.close()


def test_memory_too_small_refuses_the_reindex_by_tier(
    edge: tuple[Settings, VectorStore],
) -> None:
    settings, store = edge
    layout = layout_of(settings.qdrant)
    held = footprint(PHOTOS, DIM, layout).memory_bytes  # the live collection, by the model
    new = during_build(footprint(PHOTOS, DIM, layout), layout)
    # Room for what it holds and a tenth of what the reindex needs.
    small = settings.qdrant.model_copy(update={"memory_gib": (held + new.memory_bytes / 10) / GiB})

    with pytest.raises(IndexerError) as refused:
        check_reindex(store, NEW, DIM, small)

    message = str(refused.value)
    # Pinned and cached parts count whole; the cold parts' resident pages are said apart.
    pinned, cold = new.memory_of(Tier.PINNED), new.memory_of(Tier.COLD)
    assert new.memory_bytes == pytest.approx(pinned + new.memory_of(Tier.CACHED))
    tiers = (
        f"{size(pinned)} pinned, {size(new.memory_of(Tier.CACHED))} cached; cold parts on "
        f"disk, {size(cold)} of their pages in the page cache after searches"
    )
    assert f"needs {size(new.memory_bytes)} of memory ({tiers}) and " in message
    assert pinned > 0 and cold > 0
    short = new.memory_bytes - new.memory_bytes / 10
    assert message.endswith(f"short by {size(short)} of memory"), message
    assert not store.has_collection(NEW)
