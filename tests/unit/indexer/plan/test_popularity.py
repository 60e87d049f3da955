"""Popularity joined into the catalogue (indexer/plan/popularity.py): its value in a photo's
metadata and meta_hash, so that a sync writes a change of it as a payload write and logs its
key for the collections that follow, and an increment plans the photos the popularity command
marked, on a folder of tiny photos and the in-process store."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from redis import Redis

from core.feedback.popularity import Popularity
from core.jobstatus import JobKind, JobState, JobStatus
from core.payload import PhotoPayload
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import LIVE_ALIAS, VectorStore
from indexer.jobs.sync import popular_keys, start_increment
from indexer.plan.catalog import Photo, read_catalog
from indexer.plan.deleteguard import open_budget
from indexer.plan.increment import plan_keys
from indexer.plan.planner import Planned, plan_shard
from indexer.plan.popularity import from_metadata, joined, with_value
from indexer.plan.shards import ShardRange
from indexer.queue.messages import ReplayUnit
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION, PHOTOS, EmbedBatch

FOLLOWER = "photos-m2-follower"


@pytest.fixture
def popularity(redis: Redis) -> Popularity:
    return Popularity(redis, f"unit-{uuid.uuid4().hex}")


@pytest.fixture
def with_popularity(records: JobRecords, popularity: Popularity) -> JobRecords:
    return replace(records, popularity=popularity)


def a_photo(extra: dict[str, object] | None = None) -> Photo:
    metadata: PhotoPayload | None = None if extra is None else {"title": "x", "extra": extra}
    return Photo("p1", "a/p1.jpg", "v1", "hash0", metadata)


def test_a_manifests_popularity_is_a_number_of_its_extra() -> None:
    assert from_metadata({"extra": {"popularity": 12}}) == 12.0
    assert from_metadata({"extra": {"popularity": "3.5"}}) == 3.5  # a CSV cell is text
    for refused in ("many", -1, True, None):
        assert from_metadata({"extra": {"popularity": refused}}) is None
    assert from_metadata(None) is None


def test_a_value_goes_into_the_metadata_and_the_meta_hash() -> None:
    photo = a_photo({})
    joined_photo = with_value(photo, 4.0)
    assert joined_photo.metadata == {"title": "x", "extra": {}, "popularity": 4.0}
    assert joined_photo.meta_hash not in ("", photo.meta_hash)
    assert with_value(photo, 5.0).meta_hash != joined_photo.meta_hash
    assert with_value(photo, 4.0) == joined_photo  # the same value, the same hash
    assert with_value(photo, None) is photo
    assert with_value(a_photo(), 0.0).metadata == {"popularity": 0.0}


def test_events_win_over_the_manifest_and_photos_without_either_are_left(
    popularity: Popularity,
) -> None:
    popularity.replace({"p1": 7.0})
    manifest = a_photo({"popularity": 2})
    other = Photo("p2", "a/p2.jpg", "v1", "hash2", {"extra": {"popularity": 2}})
    bare = Photo("p3", "a/p3.jpg", "v1", "hash3", None)
    found = joined([manifest, other, bare], popularity)
    assert [(p.metadata or {}).get("popularity") for p in found] == [7.0, 2.0, None]
    assert found[2] is bare
    assert joined([bare], None) == [bare]


def test_a_sync_writes_a_changed_popularity_as_a_payload_and_logs_its_key(
    job: JobStatus,
    with_popularity: JobRecords,
    popularity: Popularity,
    store: VectorStore,
    embed_batch: EmbedBatch,
    source: LocalSource,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
) -> None:
    def plan() -> Planned:
        return plan_shard(
            job,
            ShardRange(""),
            source=source,
            store=store,
            records=with_popularity,
            readers=readers,
            settings=settings,
            worker="w1",
        )

    planned = plan()
    embed_batch([(photo, "") for batch in planned.batches for photo, _ in batch.photos])
    assert store.count(COLLECTION) == PHOTOS
    with_popularity.capture.follow(FOLLOWER)
    photo = sorted(read_catalog(source, ()).photos.values(), key=lambda p: p.key)[0]
    popularity.replace({photo.photo_id: 16.0})

    again = plan()

    assert again.batches == []  # a payload write: no photo embedded again
    assert again.record["changes"] == 1
    (stored,) = store.retrieve(COLLECTION, [photo.photo_id])
    assert stored.payload["popularity"] == 16.0
    assert with_popularity.capture.pending(FOLLOWER) == {photo.key}
    assert plan().record["changes"] == 0


def test_an_increment_plans_the_photos_whose_popularity_changed(
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
    with_popularity: JobRecords,
    popularity: Popularity,
    store: VectorStore,
    embed_batch: EmbedBatch,
    source: LocalSource,
) -> None:
    photos = sorted(read_catalog(source, ()).photos.values(), key=lambda p: p.key)
    embed_batch([(photo, "") for photo in photos])
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    with_popularity.capture.follow(FOLLOWER)
    jobs = with_popularity.jobs
    job_id = jobs.create(JobKind.INCREMENT, source=source.uri)
    changed = popularity.replace({photos[1].photo_id: 3.0, photos[4].photo_id: 9.0})
    popularity.mark_pending([*changed, "a photo not indexed"])
    feed = IndexerSettings(feed="file:///nowhere/changes.log", feed_chunk=1)

    start_increment(job_id, source.uri, store=store, records=with_popularity, settings=feed)

    units = [with_popularity.work.claim_unit(job_id, f"t{n}") for n in range(3)]
    assert units[0] is not None and units[0].to_wire() == {"kind": "feed", "seq": 0}
    replays = [u for u in units[1:] if isinstance(u, ReplayUnit)]
    assert [list(u.keys) for u in replays] == [[photos[1].key], [photos[4].key]]
    assert popular_keys(store, COLLECTION, with_popularity) == []  # taken once
    job = jobs.get(job_id)
    assert job is not None and job.state == JobState.RUNNING
    open_budget(jobs, job_id, PHOTOS, 0.5)
    for unit in replays:
        plan_keys(
            job,
            unit.id,
            list(unit.keys),
            source=source,
            store=store,
            records=with_popularity,
            readers=readers,
            settings=settings,
            worker="w1",
            started=1.0,
        )
    stored = store.retrieve(COLLECTION, [p.photo_id for p in photos])
    found = {p.photo_id: p.payload.get("popularity") for p in stored}
    assert found == {p.photo_id: {1: 3.0, 4: 9.0}.get(i) for i, p in enumerate(photos)}
    assert with_popularity.capture.pending(FOLLOWER) == {photos[1].key, photos[4].key}
