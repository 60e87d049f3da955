"""Points for the vector store: the embedding plus the payload searches filter and show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from indexer.catalog import Photo
from photosearch.embedding.arrays import Embeddings
from photosearch.sources import Source
from photosearch.vectorstore import PhotoPoint, VectorStore

_EMPTY_METADATA: dict[str, Any] = {
    "title": None,
    "tags": [],
    "photographer": None,
    "license": None,
    "created_at": None,
    "extra": {},
}


def build_payload(photo: Photo, source: Source, model_version: int) -> dict[str, Any]:
    return {
        **_EMPTY_METADATA,
        **(photo.metadata or {}),
        "photo_id": photo.photo_id,
        "source_uri": source.uri_of(photo.key),
        "content_version": photo.version,
        "meta_hash": photo.meta_hash,
        "model_version": model_version,
        "indexed_at": datetime.now(UTC).isoformat(),
    }


def write_points(
    store: VectorStore,
    collection: str,
    source: Source,
    model_version: int,
    photos: Sequence[Photo],
    vectors: Embeddings,
) -> None:
    """Upsert; ids derive from photo ids, so writing a batch again replaces the same points."""
    store.upsert(
        collection,
        [
            PhotoPoint(photo.photo_id, vector, build_payload(photo, source, model_version))
            for photo, vector in zip(photos, vectors, strict=True)
        ],
    )
