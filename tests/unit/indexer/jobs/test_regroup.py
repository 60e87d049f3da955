"""The grouping pass over one shard of a reindex's collection: photos that a load grouped
batch by batch join their near-duplicates, and the plan records what moved."""

from __future__ import annotations

import numpy as np

from core.jobstatus import JobKind, JobState
from core.sources import LocalSource
from core.vectorstore import GROUP_FIELD, VectorStore
from indexer.jobs.regroup import group_shard
from indexer.photo.writer import write_points
from indexer.plan.catalog import Photo
from indexer.plan.shards import ShardRange
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION, DIM


def test_near_duplicates_loaded_in_different_batches_join_one_group(
    source: LocalSource, store: VectorStore, records: JobRecords
) -> None:
    same = np.eye(DIM, dtype=np.float32)[:1]
    for i in (1, 2):  # a reindex's load groups each batch within itself only
        photo = Photo(f"id-{i}", f"day1/photo{i}.jpg", "v1")
        write_points(
            store,
            COLLECTION,
            source,
            1,
            [(photo, "")],
            same,
            duplicate_threshold=0.99,
            group_with_stored=False,
        )
    job_id = records.jobs.create(JobKind.REINDEX)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    job = records.jobs.get(job_id)
    assert job is not None
    searches: list[int] = []
    clock = iter([10.0, 11.0])
    planned = group_shard(
        job,
        ShardRange(""),
        store=store,
        duplicate_threshold=0.99,
        worker="w1",
        on_search=lambda: searches.append(1),
        now=lambda: next(clock),
    )
    groups = {
        r.photo_id: r.payload[GROUP_FIELD] for r in store.retrieve(COLLECTION, ["id-1", "id-2"])
    }
    assert groups["id-1"] == groups["id-2"]
    assert planned.counts == {"regrouped": 1}
    assert (planned.record["photos"], planned.record["regrouped"]) == (2, 1)
    assert (planned.record["started"], planned.record["finished"]) == (10.0, 11.0)
    assert searches
