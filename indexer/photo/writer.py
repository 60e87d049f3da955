"""Points for the vector store: the embedding plus the payload searches filter and show."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from core.embedding.arrays import Embeddings
from core.payload import PhotoPayload
from core.sources import Source
from core.terms import TERMS_FIELD, photo_terms
from core.vectorstore import GROUP_FIELD, KEY_FIELD, SHARD_FIELD, PhotoPoint, VectorStore
from indexer.photo.autotags import Tagger
from indexer.photo.duplicates import assign, assign_groups
from indexer.plan.catalog import Photo

# A photo with the label of the shard it is written in.
ShardPhoto = tuple[Photo, str]

_EMPTY_METADATA: PhotoPayload = {
    "title": None,
    "tags": [],
    "photographer": None,
    "license": None,
    "created_at": None,
    "extra": {},
}


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_payload(
    photo: Photo,
    source: Source,
    model_version: int,
    shard: str,
    *,
    now: Callable[[], datetime] = utc_now,
) -> PhotoPayload:
    return {
        **_EMPTY_METADATA,
        **(photo.metadata or {}),
        "photo_id": photo.photo_id,
        # Suggestions' vocabulary: the store counts each word's photos (core/terms.py).
        TERMS_FIELD: photo_terms(photo.metadata or {}),
        SHARD_FIELD: shard,
        KEY_FIELD: photo.key,
        "source_uri": source.uri_of(photo.key),
        # The API reads the original only below it (core.sources.read_photo).
        "source_root": source.uri,
        "content_version": photo.version,
        "meta_hash": photo.meta_hash,
        "model_version": model_version,
        "indexed_at": now().isoformat(),
    }


def write_points(
    store: VectorStore,
    collection: str,
    source: Source,
    model_version: int,
    photos: Sequence[ShardPhoto],
    vectors: Embeddings,
    *,
    duplicate_threshold: float,
    group_with_stored: bool = True,
    attributes: Sequence[PhotoPayload] | None = None,
    tagger: Tagger | None = None,
    now: Callable[[], datetime] = utc_now,
) -> None:
    """Upsert, each photo in its near-duplicate group; ids derive from photo ids, so writing a
    batch again replaces the same points. group_with_stored=False groups the batch within
    itself only: a reindex's load, grouped by a pass once indexed (indexer/jobs/regroup.py).
    `attributes`: each photo's visual attributes from its decode, in the payload (None: none)."""
    ids = [photo.photo_id for photo, _ in photos]
    visual = attributes if attributes is not None else [{}] * len(ids)
    if tagger is not None:  # `tagger`: the version's automatic tags, from the new vectors
        tags = tagger.fields(vectors)
        visual = [{**seen, **tagged} for seen, tagged in zip(visual, tags, strict=True)]
    if group_with_stored:
        groups = assign_groups(store, collection, ids, vectors, duplicate_threshold)
    else:
        groups = assign(ids, vectors, [None] * len(ids), duplicate_threshold).labels
    store.upsert(
        collection,
        [
            PhotoPoint(
                photo.photo_id,
                vector,
                build_payload(photo, source, model_version, shard, now=now)
                | {**seen, GROUP_FIELD: group},
            )
            for (photo, shard), vector, group, seen in zip(
                photos, vectors, groups, visual, strict=True
            )
        ],
    )
