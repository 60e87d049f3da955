"""One embedding batch, the path of a photo: source -> decode -> Triton -> vector store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.embedding.arrays import Pixels
from core.embedding.images import ImageLimits
from core.embedding.manifest import MAX_BATCH_SIZE
from indexer.reader import GONE, read_batch
from indexer.runtime import Runtime
from indexer.writer import ShardPhoto, write_points


@dataclass
class BatchResult:
    """Keys of the photos written, of those skipped with (version, reason), and of those
    deleted from the source since they were listed (their points deleted too)."""

    done: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)


def embed_photos(
    rt: Runtime,
    *,
    collection: str,
    model_version: int,
    source_uri: str,
    photos: Sequence[ShardPhoto],
    group_with_stored: bool = True,
) -> BatchResult:
    """Embed and upsert a batch. Bad photos are skipped; Triton/store/I-O failures raise.
    group_with_stored: search the stored photos for each one's near-duplicate group (False:
    the batch alone, in a reindex's load)."""
    source = rt.source(source_uri)
    manifest = rt.embedder.manifest(model_version)
    spec = manifest.image
    # Searches share the image model; on a CPU one chunk is what a search may wait behind.
    chunk = rt.settings.indexer.cpu_chunk if manifest.target == "cpu" else MAX_BATCH_SIZE
    limits = ImageLimits.of_stored(rt.settings.images)
    result = BatchResult()
    good: list[ShardPhoto] = []
    pixels: list[Pixels] = []
    read = read_batch(rt.readers, source, [photo for photo, _ in photos], spec, limits)
    gone: dict[str, list[str]] = {}
    for (photo, shard), outcome in zip(photos, read, strict=True):
        if isinstance(outcome, str) and outcome == GONE:
            gone.setdefault(shard, []).append(photo.photo_id)
            result.gone.append(photo.key)
        elif isinstance(outcome, str):
            result.skipped[photo.key] = (photo.version, outcome)
        else:
            good.append((photo, shard))
            pixels.append(outcome)
    for shard, photo_ids in gone.items():  # a changed photo's old point goes with it
        rt.store.delete_in_shard(collection, shard, photo_ids)
    if good:
        vectors = rt.run(
            rt.embedder.encode_images(np.stack(pixels), model_version=model_version, chunk=chunk)
        )
        write_points(
            rt.store,
            collection,
            source,
            model_version,
            good,
            vectors,
            duplicate_threshold=rt.settings.indexer.duplicate_threshold,
            group_with_stored=group_with_stored,
        )
        if group_with_stored:
            rt.metrics.duplicate_searches.labels("write").inc()
        result.done = [photo.key for photo, _ in good]
    return result
