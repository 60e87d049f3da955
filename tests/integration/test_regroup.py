"""A reindex's grouping pass on Qdrant Edge and on qdrant-client's local mode: the groups of a
sync in photo id order, whatever the shard order and page size, and the same when run again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.vectorstore import (
    GROUP_FIELD,
    KEY_FIELD,
    SHARD_FIELD,
    Hit,
    PhotoPoint,
    StoredPhoto,
    VectorStore,
    collection_name,
)
from indexer.jobs import regroup
from indexer.jobs.regroup import earlier_neighbour, regroup_shard
from indexer.photo.duplicates import assign_groups
from tests.support.stores import ENGINES, engine_store

DIM = 16
THRESHOLD = 0.9
COLL = collection_name(2, "g")
SYNCED = collection_name(2, "s")
E = np.linalg.qr(np.random.default_rng(5).normal(size=(DIM, DIM)))[0].T.astype(np.float32)


def unit(v: Embeddings) -> Embeddings:
    return np.asarray(v / np.linalg.norm(v), dtype=np.float32)


# Photo id -> vector. b2 is a1's at 0.944, q3 b2's at 0.950 but a1's at 0.896 only: a chain
# that leaves its shard. c1, c2, c3 and x9 are one image (ties). e3 is e1's at 0.952 and e2's
# at 0.990, e2 e1's at 0.981. z1, z2 are alone.
VECS: dict[str, Embeddings] = {
    "a1": E[0],
    "b2": unit(E[0] + 0.35 * E[1]),
    "c1": E[3],
    "c2": E[3],
    "c3": E[3],
    "e1": unit(E[4] + 0.2 * E[5]),
    "e2": E[4],
    "e3": unit(E[4] - 0.1 * E[5] + 0.1 * E[6]),
    "q3": unit(E[0] + 0.35 * E[1] + 0.35 * E[2]),
    "x9": E[3],
    "z1": E[7],
    "z2": E[8],
}
GROUPS = {
    "a1": "a1",
    "b2": "a1",
    "c1": "c1",
    "c2": "c1",
    "c3": "c1",
    "e1": "e1",
    "e2": "e1",
    "e3": "e1",
    "q3": "a1",
    "x9": "c1",
    "z1": "z1",
    "z2": "z2",
}
SHARDS = ("", "m")  # ids before "m" in the first


def shard_of(photo_id: str) -> str:
    return "m" if photo_id >= "m" else ""


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = engine_store(request.param, tmp_path, (COLL, SYNCED), DIM)
    yield s
    s.close()


def load(store: VectorStore, labels: dict[str, str]) -> None:
    """The photos as a load writes them: each batch grouped within itself (here: wrongly)."""
    store.upsert(
        COLL,
        [
            PhotoPoint(pid, v, {SHARD_FIELD: shard_of(pid), GROUP_FIELD: labels[pid]})
            for pid, v in VECS.items()
        ],
    )


def groups(store: VectorStore, collection: str) -> dict[str, str]:
    return {p.photo_id: p.payload[GROUP_FIELD] for p in store.retrieve(collection, list(VECS))}


def test_the_earlier_neighbour_is_the_most_similar_before_then_the_smallest_id() -> None:
    hits = [Hit("d", 0.99, {}), Hit("c", 0.95, {}), Hit("b", 0.95, {}), Hit("a", 0.93, {})]
    assert earlier_neighbour("c", hits) == "b"  # d after c, c itself; b beats a
    assert earlier_neighbour("e", hits) == "d"
    assert earlier_neighbour("a", hits) is None


@pytest.mark.parametrize("page", [256, 2])
@pytest.mark.parametrize("order", [SHARDS, SHARDS[::-1]])
def test_the_pass_gives_the_groups_of_a_sync_in_id_order_and_again_the_same(
    store: VectorStore, monkeypatch: pytest.MonkeyPatch, page: int, order: tuple[str, ...]
) -> None:
    # Pages of 2: chains leave the page as well as the shard.
    monkeypatch.setattr(regroup, "PAGE", page)
    load(store, {pid: pid for pid in VECS} | {"c2": "zzz"})
    searches: list[int] = []
    moved = [
        regroup_shard(store, COLL, label, THRESHOLD, lambda: searches.append(1)).moved
        for label in order
    ]
    assert groups(store, COLL) == GROUPS
    # Labelled with their own ids, all but the first of each group moved (and c2 from "zzz").
    assert sum(moved) == 7
    assert searches

    again = [regroup_shard(store, COLL, label, THRESHOLD) for label in order]
    assert [r.moved for r in again] == [0, 0]
    assert sum(r.photos for r in again) == len(VECS)
    assert groups(store, COLL) == GROUPS

    # A sync writing the photos one at a time in id order groups them the same.
    for pid in sorted(VECS):
        [group] = assign_groups(store, SYNCED, [pid], VECS[pid][None], THRESHOLD)
        store.upsert(SYNCED, [PhotoPoint(pid, VECS[pid], {GROUP_FIELD: group})])
    assert groups(store, SYNCED) == GROUPS


class Reads:
    """A store that notes which methods a pass calls and every payload field they return."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.calls: set[str] = set()
        self.photo_fields: set[str] = set()  # of the shard's own photos
        self.hit_fields: set[str] = set()  # of their neighbours

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.store, name)

        def noted(*args: Any, **kwargs: Any) -> Any:
            self.calls.add(name)
            result = method(*args, **kwargs)
            if name == "shard_vectors":
                return self._pages(result)
            if name == "retrieve":
                self._photos(result)
            if name == "neighbours_each":
                self.hit_fields.update(k for hits in result for hit in hits for k in hit.payload)
            return result

        return noted

    def _photos(self, photos: list[StoredPhoto]) -> None:
        self.photo_fields.update(k for photo in photos for k in photo.payload)
        assert all(photo.vector is not None for photo in photos)

    def _pages(self, pages: Iterator[list[StoredPhoto]]) -> Iterator[list[StoredPhoto]]:
        for page in pages:
            self._photos(page)
            yield page


def test_the_pass_reads_ids_vectors_and_the_group_label_only(
    store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 2, so that chains leave the page and the pass also retrieves photos by id.
    monkeypatch.setattr(regroup, "PAGE", 2)
    store.upsert(
        COLL,
        [
            PhotoPoint(
                pid,
                v,
                {
                    SHARD_FIELD: shard_of(pid),
                    KEY_FIELD: f"day1/{pid}.jpg",
                    GROUP_FIELD: pid,
                    "title": f"photo {pid} by the sea",
                    "tags": ["sea", "boat"],
                    "source_uri": f"file:///photos/day1/{pid}.jpg",
                },
            )
            for pid, v in VECS.items()
        ],
    )
    reads = Reads(store)
    for label in SHARDS:
        regroup_shard(cast(VectorStore, reads), COLL, label, THRESHOLD)

    assert groups(store, COLL) == GROUPS
    assert reads.calls <= {"shard_vectors", "retrieve", "neighbours_each", "set_group"}
    assert "retrieve" in reads.calls  # the chains that left a page were read too
    # What the engine returned, not only what was asked: the selection reached it.
    assert reads.photo_fields == {"photo_id", GROUP_FIELD}
    assert reads.hit_fields == {"photo_id"}
