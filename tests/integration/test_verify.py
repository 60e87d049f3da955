"""The check before a switch (indexer/jobs/verify.py) on both engines: a new collection equal to the
live one passes; a photo removed from it, or added to it behind the indexer's back, is named;
differences that the change log or the source explain are not."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.payload import PhotoPayload
from core.sources import LocalSource
from core.vectorstore import KEY_FIELD, SHARD_FIELD, PhotoPoint, VectorStore
from indexer.jobs.verify import Differences, common_ranges, compare
from indexer.queue.listings import Listed, version_digest
from tests.support.stores import ENGINES, engine_store

LIVE, NEW = "photos-m1-live", "photos-m2-new"
DIM = 8


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = engine_store(request.param, tmp_path, (LIVE, NEW), DIM)
    yield s
    s.close()


def put(
    store: VectorStore, collection: str, source: LocalSource, keys: list[str], shard: str
) -> None:
    rng = np.random.default_rng(len(keys))
    points = []
    for key in keys:
        found = source.stat(key)
        assert found is not None
        vector = rng.standard_normal(DIM).astype(np.float32)
        payload: PhotoPayload = {
            "photo_id": key,
            SHARD_FIELD: shard,
            KEY_FIELD: key,
            "content_version": found.version,
            "meta_hash": "",
        }
        points.append(PhotoPoint(key, vector / np.linalg.norm(vector), payload))
    store.upsert(collection, points)


@pytest.fixture
def folder(tmp_path: Path) -> LocalSource:
    root = tmp_path / "photos"
    for folder in ("a", "b", "c"):
        for i in range(4):
            path = root / folder / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"{folder}{i}".encode())
    return LocalSource(root)


def keys_of(source: LocalSource) -> list[str]:
    return sorted(o.key for o in source.list_range())


def listing(source: LocalSource) -> dict[str, Listed]:
    """What a load's listing of the whole source would record now."""
    return {o.key: Listed(version_digest(o.version), 0.0, "", None) for o in source.list_range()}


def differences(
    store: VectorStore,
    source: LocalSource,
    listed: dict[str, Listed],
    pending: set[str] | None = None,
    replayed: dict[str, str | None] | None = None,
) -> Differences:
    return compare(
        store,
        source,
        LIVE,
        NEW,
        pending=pending or set(),
        skipped=lambda keys: {},
        listed=lambda keys: {k: listed[k] for k in keys if k in listed},
        replayed=lambda keys: {k: v for k, v in (replayed or {}).items() if k in keys},
        samples=5,
        rng=random.Random(1),
    )


def check(
    store: VectorStore,
    source: LocalSource,
    pending: set[str] | None = None,
    listed: dict[str, Listed] | None = None,
) -> list[str]:
    """The problems, with the new collection loaded by a listing of the source as it is now
    (by default)."""
    found = differences(store, source, listing(source) if listed is None else listed, pending)
    assert found.explained == [], found
    return found.problems


def test_common_ranges_group_labels_by_the_bounds_both_maps_share() -> None:
    group = common_ranges(["", "b/", "c/"], ["", "a/2", "b/", "b/3"])
    assert [group(x) for x in ("", "a/2", "b/", "b/3", "c/", "c/9")] == [
        "",
        "",
        "b/",
        "b/",
        "b/",
        "b/",
    ]


def test_equal_collections_pass_though_their_shards_differ(
    store: VectorStore, folder: LocalSource
) -> None:
    keys = keys_of(folder)
    put(store, LIVE, folder, keys, "")
    put(store, NEW, folder, [k for k in keys if k < "b/"], "")
    put(store, NEW, folder, [k for k in keys if k >= "b/"], "b/")  # the new one split a shard
    assert check(store, folder) == []


def test_a_photo_removed_from_the_new_collection_and_one_added_are_named(
    store: VectorStore, folder: LocalSource
) -> None:
    keys = keys_of(folder)
    put(store, LIVE, folder, keys, "")
    put(store, NEW, folder, keys, "")
    store.delete_in_shard(NEW, "", ["b/2.jpg"])
    # Added behind the indexer's back: a point whose photo the source never had.
    extra = PhotoPoint(
        "z/ghost.jpg",
        np.ones(DIM, dtype=np.float32) / np.sqrt(DIM),
        {
            "photo_id": "z/ghost.jpg",
            SHARD_FIELD: "",
            KEY_FIELD: "z/ghost.jpg",
            "content_version": "1",
            "meta_hash": "",
        },
    )
    store.upsert(NEW, [extra])
    problems = check(store, folder)
    assert sorted(problems) == [
        f"b/2.jpg is missing (version {folder.stat('b/2.jpg').version} in the source)",  # type: ignore[union-attr]
        "z/ghost.jpg is extra: the source has no such photo",
    ]


def test_a_removal_and_an_addition_in_one_shard_are_found_by_its_keys(
    store: VectorStore, folder: LocalSource
) -> None:
    """The count of the shard stays the same; the sampled comparison of keys finds both."""
    keys = keys_of(folder)
    listed = listing(folder)
    put(store, LIVE, folder, keys, "")
    put(store, NEW, folder, keys, "")
    store.delete_in_shard(NEW, "", ["a/1.jpg"])
    (folder.root / "a" / "9.jpg").write_bytes(b"new")  # in the source, not in the live one
    extra_key = "a/8.jpg"  # in neither the source nor the live one, nor the listing
    (folder.root / "a" / "8.jpg").write_bytes(b"x")
    put(store, NEW, folder, [extra_key], "")
    (folder.root / "a" / "8.jpg").unlink()
    found = differences(store, folder, listed)
    assert [p.split(" ")[0] for p in sorted(found.problems)] == ["a/1.jpg", "a/8.jpg"]
    # a/9.jpg, in the source only, is no difference: the next sync adds it to both.
    assert found.explained == []


def test_differences_the_log_or_the_source_explain_pass(
    store: VectorStore, folder: LocalSource
) -> None:
    keys = keys_of(folder)
    put(store, LIVE, folder, keys, "")
    # The source changed after the live one was synced: the new collection's load saw it.
    (folder.root / "c" / "0.jpg").write_bytes(b"changed")
    (folder.root / "c" / "9.jpg").write_bytes(b"added")
    (folder.root / "a" / "0.jpg").unlink()
    put(store, NEW, folder, keys_of(folder), "")
    # The live side changed b/1 and the replay has not reached it yet.
    store.delete_in_shard(NEW, "", ["b/1.jpg"])
    assert check(store, folder, pending={"b/1.jpg"}) == []
    assert check(store, folder) == [
        f"b/1.jpg is missing (version {folder.stat('b/1.jpg').version} in the source)"  # type: ignore[union-attr]
    ]


def test_what_the_source_changed_after_the_listing_is_explained_not_refused(
    store: VectorStore, folder: LocalSource
) -> None:
    """Unannounced changes: the live side never heard of them, the load listed them before
    they changed again (a photo written then deleted, one written then overwritten, one
    overwritten then deleted, one deleted then written again)."""
    keys = keys_of(folder)
    put(store, LIVE, folder, keys, "")
    (folder.root / "d").mkdir()
    for name in ("churn.jpg", "rewritten.jpg"):
        (folder.root / "d" / name).write_bytes(b"written after the live sync")
    (folder.root / "a" / "0.jpg").write_bytes(b"overwritten before the listing")
    (folder.root / "b" / "0.jpg").unlink()
    listed = listing(folder)
    put(store, NEW, folder, keys_of(folder), "")
    (folder.root / "d" / "churn.jpg").unlink()
    (folder.root / "d" / "rewritten.jpg").write_bytes(b"overwritten after the listing")
    (folder.root / "a" / "0.jpg").unlink()
    (folder.root / "b" / "0.jpg").write_bytes(b"written again after the listing")
    found = differences(store, folder, listed)
    assert found.problems == []
    assert found.explained == ["a/0.jpg", "b/0.jpg", "d/churn.jpg", "d/rewritten.jpg"]
    # A photo the new collection lost, listed and unchanged since, is still refused.
    store.delete_in_shard(NEW, "", ["c/1.jpg"])
    found = differences(store, folder, listed)
    assert found.problems == [
        f"c/1.jpg is missing (version {folder.stat('c/1.jpg').version} in the source)"  # type: ignore[union-attr]
    ]


def test_a_version_a_replay_read_is_one_the_source_had(
    store: VectorStore, folder: LocalSource
) -> None:
    """A replay wrote the version it read; the source changed again, unannounced: explained.
    A version that no listing, replay or live point saw is refused."""
    keys = keys_of(folder)
    listed = listing(folder)
    put(store, LIVE, folder, keys, "")
    (folder.root / "c" / "2.jpg").write_bytes(b"the replay read this")
    put(store, NEW, folder, keys, "")
    read = folder.stat("c/2.jpg")
    assert read is not None
    (folder.root / "c" / "2.jpg").write_bytes(b"and then this, unannounced")
    found = differences(store, folder, listed, replayed={"c/2.jpg": read.version})
    assert (found.problems, found.explained) == ([], ["c/2.jpg"])
    found = differences(store, folder, listed)
    assert found.problems == [
        f"c/2.jpg is stale: version {read.version}, the source has {folder.stat('c/2.jpg').version}"  # type: ignore[union-attr]
    ]
