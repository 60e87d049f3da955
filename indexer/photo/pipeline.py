"""One embedding batch, the path of a photo: source -> decode -> Triton -> vector store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.images import ImageLimits, Reserve
from core.embedding.manifest import MAX_BATCH_SIZE, ModelManifest
from core.payload import PhotoPayload
from core.sources import Source
from core.vectorstore import VectorStore
from indexer.photo.autotags import Tagger
from indexer.photo.reader import GONE, read_batch
from indexer.photo.writer import ShardPhoto, utc_now, write_points


class ImageEmbedder(Protocol):
    """What a batch takes of the embedding client, called from a task thread (it blocks)."""

    def manifest(self, version: int) -> ModelManifest: ...

    def embed_images(self, pixels: Pixels, *, model_version: int, chunk: int) -> Embeddings: ...


@dataclass
class BatchResult:
    """Keys of the photos written, of those skipped with (version, reason), and of those
    deleted from the source since they were listed (their points deleted too)."""

    done: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)


def embed_photos(
    photos: Sequence[ShardPhoto],
    *,
    collection: str,
    model_version: int,
    source: Source,
    store: VectorStore,
    embedder: ImageEmbedder,
    readers: Executor,
    limits: ImageLimits,
    cpu_chunk: int,
    duplicate_threshold: float,
    reserve: Reserve | None = None,
    group_with_stored: bool = True,
    on_grouped: Callable[[], None] = lambda: None,
    tagger: Tagger | None = None,
    now: Callable[[], datetime] = utc_now,
) -> BatchResult:
    """Embed and upsert a batch. Bad photos are skipped; Triton/store/I-O failures raise.

    `readers` read and decode the photos within `limits`, each decode holding its memory
    through `reserve` (the worker's budget; None: unbounded); on a CPU target `cpu_chunk` images
    go to Triton at a time. group_with_stored: search the stored photos for each one's
    near-duplicate group, then call `on_grouped` (False: the batch alone, in a reindex's
    load). `tagger` tags each photo from its new vector (indexer/photo/autotags.py)."""
    manifest = embedder.manifest(model_version)
    spec = manifest.image
    # Searches share the image model; on a CPU one chunk is what a search may wait behind.
    chunk = cpu_chunk if manifest.target == "cpu" else MAX_BATCH_SIZE
    result = BatchResult()
    good: list[ShardPhoto] = []
    pixels: list[Pixels] = []
    attributes: list[PhotoPayload] = []
    read = read_batch(readers, source, [photo for photo, _ in photos], spec, limits, reserve)
    gone: dict[str, list[str]] = {}
    for (photo, shard), outcome in zip(photos, read, strict=True):
        if isinstance(outcome, str) and outcome == GONE:
            gone.setdefault(shard, []).append(photo.photo_id)
            result.gone.append(photo.key)
        elif isinstance(outcome, str):
            result.skipped[photo.key] = (photo.version, outcome)
        else:
            good.append((photo, shard))
            pixels.append(outcome.pixels)
            attributes.append(outcome.attributes)
    for shard, photo_ids in gone.items():  # a changed photo's old point goes with it
        store.delete_in_shard(collection, shard, photo_ids)
    if good:
        vectors = embedder.embed_images(np.stack(pixels), model_version=model_version, chunk=chunk)
        write_points(
            store,
            collection,
            source,
            model_version,
            good,
            vectors,
            duplicate_threshold=duplicate_threshold,
            group_with_stored=group_with_stored,
            attributes=attributes,
            tagger=tagger,
            now=now,
        )
        if group_with_stored:
            on_grouped()
        result.done = [photo.key for photo, _ in good]
    return result
