"""Points for the store: the payload a photo is written with (exactly the keys PhotoPayload
declares), its near-duplicate group, and a batch written again replacing the same points."""

from __future__ import annotations

from typing import Unpack

import numpy as np
from PIL import Image

from core.embedding.attributes import visual_attributes
from core.payload import PhotoPayload
from core.sources import LocalSource
from core.tagging.rule import TagRule
from core.vectorstore import GROUP_FIELD, VectorStore
from indexer.photo.autotags import Tagger
from indexer.photo.writer import build_payload, write_points
from indexer.plan.catalog import Photo
from indexer.plan.metadata import PhotoMetadata
from indexer.plan.popularity import with_value
from tests.unit.indexer.conftest import COLLECTION, DIM, INDEXED_AT

# What every write of a photo names, with or without its embedding: a payload-only write
# replaces these and keeps the fields written with the embedding (attributes, tags, group).
WRITTEN = {
    *("title", "tags", "photographer", "license", "created_at", "extra"),
    *("photo_id", "terms", "shard", "source_key", "source_uri", "source_root"),
    *("content_version", "meta_hash", "model_version", "indexed_at"),
}


def photo(i: int, **metadata: Unpack[PhotoPayload]) -> Photo:
    return Photo(f"id-{i}", f"day1/photo{i}.jpg", f"v{i}", f"m{i}", metadata or None)


def test_a_payload_carries_the_metadata_the_source_and_when_it_was_indexed(
    source: LocalSource,
) -> None:
    payload = build_payload(photo(1, title="A bicycle"), source, 3, "day1", now=lambda: INDEXED_AT)
    assert payload["title"] == "A bicycle"
    assert payload["tags"] == []  # the metadata a photo lacks is empty, never missing
    assert payload["source_uri"] == source.uri_of("day1/photo1.jpg")
    assert payload["source_root"] == source.uri
    assert (payload["model_version"], payload["indexed_at"]) == (3, INDEXED_AT.isoformat())


def test_near_duplicates_share_a_group_and_a_rewrite_replaces_the_points(
    source: LocalSource, store: VectorStore
) -> None:
    same, other = np.eye(DIM, dtype=np.float32)[0], np.eye(DIM, dtype=np.float32)[1]
    photos = [(photo(1), ""), (photo(2), ""), (photo(3), "")]
    vectors = np.stack([same, same, other])
    for _ in range(2):  # a retried batch writes the same points again
        write_points(store, COLLECTION, source, 1, photos, vectors, duplicate_threshold=0.99)
    assert store.count(COLLECTION) == 3
    groups = {
        record.photo_id: record.payload[GROUP_FIELD]
        for record in store.retrieve(COLLECTION, ["id-1", "id-2", "id-3"])
    }
    assert groups["id-1"] == groups["id-2"] != groups["id-3"]


def test_a_payload_carries_the_words_of_its_title_and_tags_for_suggestions(
    source: LocalSource, store: VectorStore
) -> None:
    tagged = photo(1, title="A Red Bicycle in the café", tags=["Street", "red bike"])
    payload = build_payload(tagged, source, 3, "day1", now=lambda: INDEXED_AT)
    assert payload["terms"] == ["red", "bicycle", "cafe", "street", "bike"]
    # The store counts each word's photos from its index: what suggestions read.
    write_points(
        store,
        COLLECTION,
        source,
        1,
        [(tagged, "")],
        np.eye(DIM, dtype=np.float32)[:1],
        duplicate_threshold=0.99,
    )
    assert dict(store.value_counts(COLLECTION, "terms", limit=10))["bicycle"] == 1


def test_every_write_of_a_photo_names_the_same_declared_keys(source: LocalSource) -> None:
    bare = build_payload(photo(1), source, 3, "day1", now=lambda: INDEXED_AT)
    described = build_payload(
        photo(2, title="A bicycle", tags=["street"], created_at="2024-05-01T06:30:00+00:00"),
        source,
        3,
        "day1",
        now=lambda: INDEXED_AT,
    )
    assert set(bare) == set(described) == WRITTEN
    assert WRITTEN < set(PhotoPayload.__annotations__)


def test_a_point_written_with_all_it_can_hold_has_exactly_the_declared_keys(
    source: LocalSource, store: VectorStore
) -> None:
    row = PhotoMetadata(path="day1/photo1.jpg", title="A bicycle", tags=["street"])
    described = Photo("id-1", "day1/photo1.jpg", "v1", row.digest(), row.payload())
    popular = with_value(described, 4.0)
    looks = visual_attributes(Image.new("RGB", (40, 20), (200, 30, 30)), (400, 200))
    vectors = np.eye(DIM, dtype=np.float32)[:1]
    tagger = Tagger(1, "k1", names=("bicycle",), tag_vectors=vectors, rule=TagRule(-1, -1))
    write_points(
        store,
        COLLECTION,
        source,
        1,
        [(popular, "day1")],
        vectors,
        duplicate_threshold=0.99,
        attributes=[looks],
        tagger=tagger,
        now=lambda: INDEXED_AT,
    )
    [stored] = store.retrieve(COLLECTION, ["id-1"])
    assert set(stored.payload) == set(PhotoPayload.__annotations__)
    assert (stored.payload["popularity"], stored.payload["auto_tags"]) == (4.0, ["bicycle"])
