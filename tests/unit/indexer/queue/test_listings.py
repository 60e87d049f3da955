"""What a reindex's listings saw (indexer/queue/listings.py), in the real Redis: a key's
version by the latest listing whose range covers it, what replays read, what was repaired."""

from __future__ import annotations

from indexer.plan.shards import ShardRange
from indexer.queue.listings import Listed, version_digest
from indexer.queue.records import JobRecords

JOB = "job-1"
V1, V2 = version_digest("v1"), version_digest("v2")


def test_a_key_is_read_from_the_latest_listing_that_covers_it(records: JobRecords) -> None:
    listings = records.listings
    listings.record(JOB, ShardRange("", "m"), {"a/1.jpg": "v1", "f/2.jpg": "v1"}, at=10.0)
    listings.record(JOB, ShardRange("m"), {"x/3.jpg": "v1"}, at=10.0)
    # A catch-up round lists a shard of the live map again, over part of the first range.
    listings.record(JOB, ShardRange("f", "g"), {"f/2.jpg": "v2", "f/9.jpg": "v1"}, at=20.0)
    found = listings.lookup(JOB, ["a/1.jpg", "f/2.jpg", "f/9.jpg", "b/new.jpg", "x/3.jpg"])
    assert found == {
        "a/1.jpg": Listed(V1, 10.0, "", "m"),
        "f/2.jpg": Listed(V2, 20.0, "f", "g"),
        "f/9.jpg": Listed(V1, 20.0, "f", "g"),
        # Listed without it: written after its shard's listing.
        "b/new.jpg": Listed(None, 10.0, "", "m"),
        "x/3.jpg": Listed(V1, 10.0, "m", None),
    }
    assert listings.lookup("another-job", ["a/1.jpg"]) == {}
    # Digests: the listing's time, then 12 bytes a key, whatever its name's length.
    assert listings.size(JOB) == 3 * 8 + 12 * 5


def test_a_planner_run_again_writes_the_same_listing(records: JobRecords) -> None:
    listings = records.listings
    for _ in range(2):
        listings.record(JOB, ShardRange(""), {"a.jpg": "v1"}, at=5.0)
    assert listings.lookup(JOB, ["a.jpg"]) == {"a.jpg": Listed(V1, 5.0, "", None)}


def test_replays_keep_the_version_they_read_and_repairs_are_kept(records: JobRecords) -> None:
    listings = records.listings
    listings.saw(JOB, {"a.jpg": "v2", "gone.jpg": None})
    listings.saw(JOB, {"a.jpg": "v3"})
    assert listings.replayed(JOB, ["a.jpg", "gone.jpg", "never.jpg"]) == {
        "a.jpg": "v3",
        "gone.jpg": None,
    }
    listings.repaired(JOB, ["b.jpg", "a.jpg"])
    listings.repaired(JOB, ["a.jpg"])
    assert listings.repaired_keys(JOB) == ["a.jpg", "b.jpg"]
    listings.record(JOB, ShardRange(""), {"a.jpg": "v1"}, at=5.0)
    listings.forget(JOB)
    assert listings.lookup(JOB, ["a.jpg"]) == {}
    assert listings.replayed(JOB, ["a.jpg"]) == {}
    assert listings.repaired_keys(JOB) == []


def test_a_listing_says_whether_it_saw_a_version() -> None:
    listed = Listed(version_digest("v1"), 0.0, "", None)
    assert listed.saw("v1") and not listed.saw("v2") and not listed.saw(None)
    absent = Listed(None, 0.0, "", None)
    assert absent.saw(None) and not absent.saw("v1")
