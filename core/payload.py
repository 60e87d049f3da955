"""A photo's payload: the fields the indexer stores with each point and every search reads back.

Both halves import it: the indexer writes one (indexer/photo/writer.py), the vector store
carries it in its points and hits (core/vectorstore/), and the searches read it
(query_api/search/). Every key is optional, for three reasons a reader meets: a search or a
read selects the fields it needs (photo_id always among them: payload_fields in
core/vectorstore/base.py), a point written by an earlier release lacks the keys added since,
and a payload-only write names just the fields it changes (the store merges them into the
stored ones). A key never changes its name or its value's form: the stored points, the
engine's payload indexes (KEYWORD_FIELDS and the others beside it) and the API's answers all
rely on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast


class PhotoPayload(TypedDict, total=False):
    """One point's payload, by key. Who writes it: `build_payload` (indexer/photo/writer.py)
    on every write of a photo, `write_points` there on a write with its embedding, and the
    store's labels (shard, group) in between."""

    # The manifest's fields (indexer/plan/metadata.py, PhotoMetadata.payload), which
    # build_payload writes on every write: None, [] or {} where no row describes the photo.
    title: str | None
    tags: list[str]  # lower case, sorted, distinct
    photographer: str | None
    license: str | None
    created_at: str | None  # RFC 3339 with its offset, for the datetime index
    extra: dict[str, Any]  # the row's other columns, as the manifest gives them
    # The photo's popularity (indexer/plan/popularity.py: the feedback events', else the
    # manifest's `popularity` column), which the popularity boost reads; absent without one.
    popularity: float
    # The photo's identity: the manifest's id, else its source key. The store writes it on
    # every upsert and payload write too (a point names its photo by it).
    photo_id: str
    # The distinct words of title and tags that suggestions complete (core/terms.py), from
    # build_payload; points written before suggestions lack it.
    terms: list[str]
    # The label of the shard the photo was planned in (indexer/plan/shards.py), from
    # build_payload or the store's relabelling when a shard splits; and the source key
    # itself. Points written before shards lack both (indexer/plan/planner.py's `keyed`).
    shard: str
    source_key: str
    # Where the original is: its URI and the source root the API reads it below
    # (core/sources/access.py); points written before roots were recorded lack the root.
    source_uri: str
    source_root: str
    # What the point was made from, which a sync compares with the source: the file's version
    # (ETag or mtime and size) and the digest of its metadata (a payload-only write on change).
    content_version: str
    meta_hash: str
    # The model version that embedded it, and when build_payload wrote it (RFC 3339, UTC).
    model_version: int
    indexed_at: str
    # Visual attributes of the decoded photo (core/embedding/attributes.py), written with
    # its embedding (write_points) and kept by payload-only writes; points embedded before
    # they were computed lack them.
    width: int  # the original's, upright
    height: int
    aspect_ratio: float  # width / height, to 3 decimals
    orientation: str  # "landscape", "portrait" or "square"
    colors: list[str]  # palette names covering COLOR_MIN_SHARE or more, largest first
    color_shares: dict[str, float]  # palette name -> share, for those of SHARE_MIN or more
    copy_space: int  # 0 or 1, not a bool: Qdrant Edge filters a flag as an integer
    # The automatic tags (indexer/photo/autotags.py: Tagger.fields on a write with the
    # embedding, with_tags on a payload-only write) and the key of the vocabulary and rule
    # that made them ("" without tags); points written before automatic tags lack both.
    auto_tags: list[str]
    auto_tags_vocabulary: str
    # The near-duplicate group: the id of its first photo (indexer/photo/duplicates.py, from
    # write_points; the regroup pass relabels, indexer/jobs/regroup.py). Points written before
    # groups lack it: each is its own group.
    dup_group: str


def payload_of(stored: Mapping[str, Any] | None) -> PhotoPayload:
    """A payload as an engine hands it back (its JSON, None when no field was read), typed:
    the keys are those a PhotoPayload declares, as written, or as an earlier release wrote
    a subset of them."""
    return cast(PhotoPayload, dict(stored or {}))


def as_json(payload: PhotoPayload) -> dict[str, Any]:
    """The same payload as an engine's client takes it: a JSON object (no copy)."""
    return cast(dict[str, Any], payload)
