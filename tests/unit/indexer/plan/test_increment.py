"""Planning the keys a change feed reported, on a folder of tiny photos and the in-process
store: a new photo and a changed one are embedded, a deleted one leaves the index, a file
that is no photo is skipped with its reason; nothing is listed. A journal feed's chunk is
planned by the test's clock, its next chunk a unit of its own.

The photos are first embedded with the stand-in of Triton's image encoder
(tests/unit/indexer/conftest.py): Triton cannot run in a unit test.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from redis import Redis

from core.jobstatus import JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import VectorStore
from indexer.plan.catalog import read_catalog
from indexer.plan.deleteguard import open_budget
from indexer.plan.feed import JournalFeed
from indexer.plan.increment import plan_feed, plan_keys
from indexer.queue.records import JobRecords
from tests.support.indexing import write_photo
from tests.unit.indexer.conftest import COLLECTION, PHOTOS, EmbedBatch


def test_the_reported_keys_are_planned_without_a_listing(
    job: JobStatus,
    folder: Path,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
    embed_batch: EmbedBatch,
) -> None:
    photos = sorted(read_catalog(source, ()).photos.values(), key=lambda p: p.key)
    embed_batch([(photo, "") for photo in photos])
    open_budget(records.jobs, job.id, PHOTOS, 0.5)
    changed, deleted, unchanged = photos[0].key, photos[1].key, photos[2].key
    write_photo(folder / changed, 99)
    (folder / deleted).unlink()
    write_photo(folder / "day3/new.jpg", 7)
    (folder / "day3/notes.txt").write_text("not a photo")
    keys = [changed, deleted, unchanged, "day3/new.jpg", "day3/notes.txt"]

    planned = plan_keys(
        job,
        "feed:0",
        keys,
        source=source,
        store=store,
        records=records,
        readers=readers,
        settings=settings,
        worker="w1",
        started=10.0,
        now=lambda: 12.0,
    )

    embedded = sorted(photo.key for batch in planned.batches for photo, _ in batch.photos)
    assert embedded == sorted([changed, "day3/new.jpg"])
    assert store.count(COLLECTION) == PHOTOS - 1
    assert planned.counts["listed"] == len(keys)
    assert planned.counts["skipped"] == 1
    assert records.skips.get(COLLECTION, ["day3/notes.txt"])["day3/notes.txt"][1] == (
        "unsupported file type .txt"
    )
    assert planned.record | {"worker": "w1"} == {
        "keys": len(keys),
        "changes": 3,
        "worker": "w1",
        "started": 10.0,
        "finished": 12.0,
    }


def test_a_chunk_of_the_feed_is_planned_and_the_rest_is_the_next_unit(
    job: JobStatus,
    folder: Path,
    tmp_path: Path,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    redis: Redis,
) -> None:
    write_photo(folder / "day3/a.jpg", 7)
    write_photo(folder / "day3/b.jpg", 8)
    journal = tmp_path / "changes.journal"
    lines = ["day3/a.jpg\n", "/day3/b.jpg\n", "day3/c.jpg\n"]
    journal.write_text("".join(lines))
    feed = JournalFeed(journal, redis, records.jobs.prefix)
    open_budget(records.jobs, job.id, PHOTOS, 0.5)
    planned = plan_feed(
        job,
        0,
        feed,
        source=source,
        store=store,
        records=records,
        readers=readers,
        settings=IndexerSettings(batch_size=4, feed_chunk=2),
        worker="w1",
        now=lambda: 10.0,
    )

    embedded = sorted(photo.key for batch in planned.batches for photo, _ in batch.photos)
    assert embedded == ["day3/a.jpg", "day3/b.jpg"]
    assert (planned.record["feed"], planned.record["keys"], planned.record["started"]) == (
        0,
        2,
        10.0,
    )
    assert [(unit.id, unit.to_wire()) for unit in planned.units] == [
        ("feed:1", {"kind": "feed", "seq": 1})
    ]
    # The feed's offset moves with the plan's commit (a mark), so a chunk planned again
    # after a crash reads the same keys.
    read = len("".join(lines[:2]))
    assert list(planned.marks.values()) == [(f"{journal.stat().st_ino}:{read}", 0)]
