"""Work the previous release queued is read by this one: its key layout (`JOB_KEYS`), its
units and its batches, as that release's scripts left them in Redis, against the tests' Redis.

A worker upgraded while a reindex runs claims what the old workers committed: a renamed list,
or a unit or batch field read differently, would strand that work without an error.
"""

from __future__ import annotations

import json
import uuid

from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobKind
from indexer.plan.shards import ShardRange
from indexer.queue.scripts import JOB_KEYS
from indexer.queue.workqueue import WorkQueue

# The previous release's layout: a job's lists, after its record, in this order.
PREVIOUS_KEYS = (
    *("units", "pclaims", "ptokens", "work", "items"),
    *("wclaims", "wtokens", "unitids", "planned"),
)
# Its units of each kind, and a batch body, as its planners and scripts wrote them.
PREVIOUS_UNITS = [
    {"kind": "shard", "lo": "a/", "hi": "m/"},
    {"kind": "shard", "lo": "m/", "hi": None, "confirm": True},
    {"kind": "group", "lo": "", "hi": "a/"},
    {"kind": "replay", "id": "replay:3:0", "keys": ["a/1.jpg", "b/2.jpg"]},
    {"kind": "feed", "seq": 4},
]
PREVIOUS_BATCH = {
    "photos": [
        {
            "photo_id": "a/1",
            "key": "a/1.jpg",
            "version": "1700000000.0:2048",
            "meta_hash": "5d41402abc4b2a76",
            "metadata": {"title": "a red bicycle", "tags": ["bicycle"]},
            "shard": "a/",
        }
    ]
}


def test_the_key_layout_is_the_previous_releases() -> None:
    assert JOB_KEYS == PREVIOUS_KEYS


def test_units_and_a_batch_the_previous_release_queued_are_claimed_and_read(
    redis: Redis,
) -> None:
    prefix = f"previous-{uuid.uuid4().hex[:8]}"
    job_id = Jobs(redis, prefix).create(JobKind.REINDEX)
    job = f"{prefix}:job:{job_id}"
    # The round as the previous release's START_ROUND and COMMIT left it: started, its units
    # waiting, one batch committed.
    redis.hset(job, mapping={"round": 3, "round_started:3": 1, "batch_seq": 1})
    redis.rpush(f"{job}:units", *(json.dumps(unit) for unit in PREVIOUS_UNITS))
    redis.hset(f"{job}:items", "b1", json.dumps(PREVIOUS_BATCH))
    redis.rpush(f"{job}:work", "b1")

    work = WorkQueue(redis, prefix)
    tokens = work.reserve(job_id, max_embed=1, max_plan=5, plan_ahead=100, ttl_s=600, lease_s=600)
    assert (len(tokens.embed), len(tokens.plan)) == (1, 5)
    claimed_units = [work.claim_unit(job_id, token) for token in tokens.plan]
    assert [unit and unit.to_wire() for unit in claimed_units] == PREVIOUS_UNITS
    assert [unit and unit.id for unit in claimed_units] == [
        ShardRange("a/", "m/").id,
        ShardRange("m/", None).id,
        ShardRange("", "a/").id,
        "replay:3:0",
        "feed:4",
    ]

    batch = work.claim_batch(job_id, tokens.embed[0])
    assert batch is not None and batch.body is not None
    assert batch.id == "b1"
    [(photo, label)] = batch.body.photos
    assert label == "a/"
    assert (photo.photo_id, photo.key, photo.metadata) == (
        "a/1",
        "a/1.jpg",
        {"title": "a red bicycle", "tags": ["bicycle"]},
    )
