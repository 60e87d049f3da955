"""The store's writes and reads of points (core/vectorstore/store_points.py), on Qdrant Edge
and on qdrant-client's local mode: labels and payloads rewritten without the embedding, a
delete that spares a photo that moved to another shard, groups and shards read back, and a
payload an earlier release wrote read back as it was."""

from __future__ import annotations

import numpy as np

from core.keywords import query_vector
from core.payload import payload_of
from core.vectorstore import PhotoPoint, VectorStore
from core.vectorstore.store_points import Points
from core.vectorstore.store_searches import Searches
from tests.support.payloads import OLDEST, PREVIOUS
from tests.support.stores import as_stored
from tests.unit.core.vectorstore.conftest import COLL, DIM, PHOTOS


def test_a_payload_rewrite_merges_fields_and_keeps_the_embedding_and_group(
    store: Points,
) -> None:
    store.set_group(COLL, "g1", ["p000", "p001"])
    store.set_payloads(COLL, {"p000": {"title": "zebra crossing"}, "p001": {"license": "rm"}})
    first, second = store.retrieve(COLL, ["p000", "p001"], with_vectors=True)
    assert first.payload["title"] == "zebra crossing"
    assert first.payload["dup_group"] == second.payload["dup_group"] == "g1"
    assert (
        second.payload["license"] == "rm" and second.payload["title"] == PHOTOS[1].payload["title"]
    )
    assert first.vector is not None
    np.testing.assert_allclose(first.vector, as_stored(store, PHOTOS[0].vector), atol=1e-6)
    # The keywords vector follows the new title: the new word finds the photo.
    assert isinstance(store, Searches)
    hits = store.keyword_search(COLL, query_vector("zebra"), limit=5)
    assert [h.photo_id for h in hits] == ["p000"]


def test_shards_and_groups_read_back_as_written(store: Points) -> None:
    assert store.count(COLL) == len(PHOTOS)
    store.set_shard(COLL, "s1", [f"p{i:03d}" for i in range(10)])
    store.set_shard(COLL, "s2", ["p010", "p011"])
    assert store.shard_sizes(COLL) == {"s1": 10, "s2": 2}
    assert store.shard_labels(COLL) == ["s1", "s2"]
    assert [p.photo_id for p in store.points(COLL, shard="s2")] == ["p010", "p011"]
    assert len(list(store.points(COLL, unlabelled=True))) == len(PHOTOS) - 12
    store.set_group(COLL, "g2", ["p005", "p003", "p004"])
    store.set_group(COLL, "g1", ["p020", "p021"])
    assert store.group_sizes(COLL, limit=5) == [("g2", 3), ("g1", 2)]
    assert store.group_members(COLL, ["g2", "g1"], limit_each=2) == {
        "g1": ["p020", "p021"],
        "g2": ["p003", "p004"],
    }


def test_a_delete_in_a_shard_spares_a_photo_that_moved_and_unknown_ids(store: Points) -> None:
    store.set_shard(COLL, "s1", ["p000", "p001", "p002"])
    store.set_shard(COLL, "s2", ["p002"])  # moved meanwhile
    store.delete_in_shard(COLL, "s1", ["p000", "p001", "p002"])
    assert [p.photo_id for p in store.points_by_id(COLL, ["p000", "p001", "p002"])] == ["p002"]
    store.delete(COLL, ["p002", "nobody"])
    assert store.count(COLL) == len(PHOTOS) - 3
    assert store.retrieve(COLL, ["p002", "p003"]) and store.retrieve(COLL, ["p002"]) == []


def test_a_payload_an_earlier_release_wrote_reads_back_as_it_was_written(
    store: VectorStore,
) -> None:
    vector = np.eye(DIM, dtype=np.float32)[0]
    store.upsert(
        COLL,
        [
            PhotoPoint("harbour.jpg", vector, payload_of(PREVIOUS)),
            PhotoPoint("mill.jpg", vector, payload_of(OLDEST)),
        ],
    )
    harbour, mill = store.retrieve(COLL, ["harbour.jpg", "mill.jpg"])
    assert (harbour.payload, mill.payload) == (PREVIOUS, OLDEST)
    found = store.keyword_search(COLL, query_vector("harbour dawn"), limit=3)
    assert [hit.photo_id for hit in found] == ["harbour.jpg"]
    assert found[0].payload == PREVIOUS
