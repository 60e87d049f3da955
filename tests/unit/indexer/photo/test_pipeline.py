"""One embedding batch on a folder of tiny photos and the in-process store: photos written
with their payload, a broken one skipped with its reason, one deleted since it was listed
gone with its point, Triton's chunks as the target asks.

Triton's image encoder is stood in for (tests/unit/indexer/conftest.py): it cannot run in a
unit test. Reading, decoding, grouping and writing are the real ones.
"""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path

from PIL import Image

from core.embedding.attributes import FIELDS
from core.embedding.budget import MemoryBudget
from core.embedding.images import ImageLimits, decoded_bytes
from core.embedding.manifest import MAX_BATCH_SIZE
from core.sources import LocalSource
from core.vectorstore import KEY_FIELD, SHARD_FIELD, VectorStore
from indexer.photo.pipeline import BatchResult, embed_photos
from indexer.photo.writer import build_payload
from indexer.plan.catalog import Photo, read_catalog
from tests.unit.indexer.conftest import COLLECTION, INDEXED_AT, PHOTOS, MeanColours


def listed(source: LocalSource) -> list[Photo]:
    return sorted(read_catalog(source, ()).photos.values(), key=lambda photo: photo.key)


def embed(
    photos: list[Photo],
    source: LocalSource,
    store: VectorStore,
    readers: Executor,
    embedder: MeanColours,
    grouped: list[int] | None = None,
) -> BatchResult:
    return embed_photos(
        [(photo, "") for photo in photos],
        collection=COLLECTION,
        model_version=1,
        source=source,
        store=store,
        embedder=embedder,
        readers=readers,
        limits=ImageLimits(),
        cpu_chunk=4,
        duplicate_threshold=0.9999,
        on_grouped=lambda: (grouped if grouped is not None else []).append(1),
        now=lambda: INDEXED_AT,
    )


def test_a_batch_writes_each_photo_with_its_payload(
    source: LocalSource, store: VectorStore, readers: Executor
) -> None:
    photos = listed(source)
    grouped: list[int] = []
    result = embed(photos, source, store, readers, MeanColours(), grouped)
    assert result == BatchResult(done=[p.key for p in photos])
    assert store.count(COLLECTION) == PHOTOS
    (stored,) = store.retrieve(COLLECTION, [photos[0].photo_id])
    payload = stored.payload
    assert payload["indexed_at"] == INDEXED_AT.isoformat()
    assert (payload[KEY_FIELD], payload[SHARD_FIELD]) == (photos[0].key, "")
    assert (payload["model_version"], payload["content_version"]) == (1, photos[0].version)
    assert grouped == [1]  # one search of the stored photos for the batch's groups


def test_a_broken_photo_is_skipped_and_a_deleted_one_leaves_with_its_point(
    source: LocalSource, folder: Path, store: VectorStore, readers: Executor
) -> None:
    photos = listed(source)
    embed(photos, source, store, readers, MeanColours())
    broken, deleted = photos[0], photos[1]
    (folder / broken.key).write_bytes(b"not a photo")
    (folder / deleted.key).unlink()
    result = embed([broken, deleted, photos[2]], source, store, readers, MeanColours())
    assert result.done == [photos[2].key]
    assert result.gone == [deleted.key]
    assert list(result.skipped) == [broken.key]
    assert result.skipped[broken.key][0] == broken.version
    assert store.count(COLLECTION) == PHOTOS - 1


def test_triton_gets_the_cpu_targets_chunks_and_a_gpus_whole_batches(
    source: LocalSource, store: VectorStore, readers: Executor
) -> None:
    photos = listed(source)
    cpu, gpu = MeanColours("cpu"), MeanColours("gpu")
    embed(photos, source, store, readers, cpu)
    embed(photos, source, store, readers, gpu)
    assert cpu.calls == [(PHOTOS, 4)]
    assert gpu.calls == [(PHOTOS, MAX_BATCH_SIZE)]


def test_a_batch_decodes_within_the_workers_memory_budget(
    tmp_path: Path, store: VectorStore, readers: Executor
) -> None:
    """Four large PNGs (the budget holds one decode at a time: the other reader thread waits
    for room) and one larger than the whole budget, skipped with its reason; the ledger never
    held more than the budget, and gives it all back."""
    root = tmp_path / "large"
    root.mkdir()
    for i in range(4):
        Image.new("RGB", (1200, 1200), (40 * i, 90, 200)).save(root / f"big{i}.png")
    Image.new("RGB", (4000, 4000), (10, 20, 30)).save(root / "huge.png")
    each = decoded_bytes((1200, 1200), "RGB", 16)
    budget = MemoryBudget(each * 3 // 2, holder="the worker (decode_memory_mb)")
    assert decoded_bytes((4000, 4000), "RGB", 16) > budget.total
    source = LocalSource(root)
    photos = listed(source)
    result = embed_photos(
        [(photo, "") for photo in photos],
        collection=COLLECTION,
        model_version=1,
        source=source,
        store=store,
        embedder=MeanColours(),
        readers=readers,
        limits=ImageLimits(),
        reserve=budget.reserve,
        cpu_chunk=4,
        duplicate_threshold=0.9999,
    )
    assert result.done == [f"big{i}.png" for i in range(4)]
    ((version, reason),) = result.skipped.values()
    assert list(result.skipped) == ["huge.png"] and version == photos[-1].version
    assert "more than the" in reason and "the worker (decode_memory_mb)" in reason, reason
    assert each <= budget.peak_held <= budget.total < 2 * each
    assert budget.free == budget.total


def test_each_photo_is_written_with_the_visual_attributes_of_its_decode(
    source: LocalSource, folder: Path, store: VectorStore, readers: Executor
) -> None:
    # A yellow 400x100 banner beside the folder's 128x128 photos.
    Image.new("RGB", (400, 100), (240, 220, 30)).save(folder / "day1/banner.png")
    photos = listed(source)
    embed(photos, source, store, readers, MeanColours())
    stored = {p.payload[KEY_FIELD]: p.payload for p in store.retrieve(COLLECTION, ids(photos))}
    banner = stored["day1/banner.png"]
    assert {name: banner.get(name) for name in FIELDS} == {
        "width": 400,
        "height": 100,
        "aspect_ratio": 4.0,
        "orientation": "landscape",
        "colors": ["yellow"],
        "color_shares": {"yellow": 1.0},
        "copy_space": 1,
    }
    for payload in stored.values():
        assert set(FIELDS) <= set(payload)
        assert payload["orientation"] in {"square", "landscape"}
    # A payload-only write (a metadata change) keeps them: the payload is merged.
    banner_photo = next(p for p in photos if p.key == "day1/banner.png")
    store.set_payload(COLLECTION, banner_photo.photo_id, build_payload(banner_photo, source, 1, ""))
    [kept] = store.retrieve(COLLECTION, [banner_photo.photo_id])
    assert kept.payload["colors"] == ["yellow"] and kept.payload["width"] == 400


def ids(photos: list[Photo]) -> list[str]:
    return [p.photo_id for p in photos]
