"""Planning the keys a change feed reported, on a folder of tiny photos and the in-process
store: a new photo and a changed one are embedded, a deleted one leaves the index, a file
that is no photo is skipped with its reason; nothing is listed.

The photos are first embedded with the stand-in of Triton's image encoder
(tests/unit/indexer/conftest.py): Triton cannot run in a unit test.
"""

from __future__ import annotations

from pathlib import Path

from core.jobs import JobStatus
from core.sources import LocalSource
from core.vectorstore import VectorStore
from indexer.catalog import read_catalog
from indexer.deleteguard import open_budget
from indexer.increment import plan_keys
from indexer.planner import PlanParts
from indexer.records import JobRecords
from tests.support.indexing import write_photo
from tests.unit.indexer.conftest import COLLECTION, PHOTOS, EmbedBatch


def test_the_reported_keys_are_planned_without_a_listing(
    job: JobStatus,
    folder: Path,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    plan_parts: PlanParts,
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
        job, "feed:0", keys, **plan_parts, worker="w1", started=10.0, now=lambda: 12.0
    )

    embedded = sorted(p["key"] for batch in planned.batches for p in batch["photos"])
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
