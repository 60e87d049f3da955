"""Planning one shard on a folder of tiny photos and the in-process store: what it batches,
finds unchanged, deletes, holds back, refuses and splits; `now` stamps its record.

The plans' batches are embedded by indexer.photo.pipeline with the stand-in of Triton's image
encoder (tests/unit/indexer/conftest.py): Triton cannot run in a unit test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.jobstatus import JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import VectorStore
from indexer.plan.catalog import Photo
from indexer.plan.deleteguard import DeletesRefused, open_budget
from indexer.plan.planner import Planned, plan_shard
from indexer.plan.shards import ShardRange
from indexer.queue.records import JobRecords
from tests.support.indexing import photo_folder
from tests.unit.indexer.conftest import COLLECTION, PHOTOS, EmbedBatch

Plan = Callable[..., Planned]


def ticks(start: float = 1000.0) -> Callable[[], float]:
    """A clock that moves one second each time it is read."""
    count = itertools.count(start)
    return lambda: float(next(count))


def keys_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def plan(
    job: JobStatus,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
) -> Plan:
    def run(
        shard: ShardRange | None = None,
        now: Callable[[], float] | None = None,
        confirm: bool = False,
    ) -> Planned:
        return plan_shard(
            job,
            shard or ShardRange(""),
            source=source,
            store=store,
            records=records,
            readers=readers,
            settings=settings,
            worker="w1",
            confirm=confirm,
            now=now or ticks(),
        )

    return run


def batched(planned: Planned) -> list[tuple[Photo, str]]:
    return [photo for batch in planned.batches for photo in batch.photos]


@pytest.fixture
def indexed(plan: Plan, store: VectorStore, embed_batch: EmbedBatch) -> None:
    """The folder planned and its batches embedded, as the embed tasks would."""
    embed_batch(batched(plan()))
    assert store.count(COLLECTION) == PHOTOS


def test_a_first_plan_batches_every_photo_of_the_shard(plan: Plan, folder: Path) -> None:
    planned = plan(now=ticks(1000.0))
    assert sorted(photo.key for photo, _ in batched(planned)) == keys_in(folder)
    assert [len(batch.photos) for batch in planned.batches] == [4, 2]  # batch_size 4
    assert planned.counts == {"total": 6, "skipped": 0, "unchanged": 0, "changes": 6, "listed": 6}
    record = planned.record
    assert (record["label"], record["photos"], record["points"]) == ("", PHOTOS, PHOTOS)
    assert (record["started"], record["finished"]) == (1000.0, 1001.0)


@pytest.mark.usefixtures("indexed")
def test_a_shard_planned_again_unchanged_has_nothing_to_embed(plan: Plan) -> None:
    planned = plan()
    assert planned.batches == []
    assert planned.counts["unchanged"] == PHOTOS
    assert planned.record["changes"] == 0


@pytest.mark.usefixtures("indexed")
def test_a_photo_gone_from_the_source_is_deleted_and_counted(
    plan: Plan, folder: Path, store: VectorStore, records: JobRecords, job: JobStatus
) -> None:
    open_budget(records.jobs, job.id, PHOTOS, 0.5)
    (folder / keys_in(folder)[0]).unlink()
    planned = plan()
    assert store.count(COLLECTION) == PHOTOS - 1
    assert planned.record["changes"] == 1
    assert planned.batches == []
    counted = records.jobs.get(job.id)
    assert counted is not None and counted.deleted == 1


@pytest.mark.usefixtures("indexed")
def test_a_shard_that_would_lose_most_of_its_points_is_held_back_whole(
    plan: Plan, folder: Path, store: VectorStore, records: JobRecords, job: JobStatus
) -> None:
    open_budget(records.jobs, job.id, 100, 0.5)  # a large live index: within the job's budget
    for key in keys_in(folder)[:4]:
        (folder / key).unlink()
    planned = plan()
    assert planned.counts == {"held": 4}
    assert planned.record["held"] == 4
    assert store.count(COLLECTION) == PHOTOS  # nothing deleted until confirmed
    plan(confirm=True)
    assert store.count(COLLECTION) == PHOTOS - 4


@pytest.mark.usefixtures("indexed")
def test_deletions_past_the_jobs_budget_are_refused_and_none_is_made(
    plan: Plan, folder: Path, store: VectorStore, records: JobRecords, job: JobStatus
) -> None:
    open_budget(records.jobs, job.id, PHOTOS, 0.5)  # at most 3 deletions
    for key in keys_in(folder)[:4]:
        (folder / key).unlink()
    with pytest.raises(DeletesRefused, match=r"max_delete_share=0\.5"):
        plan()
    assert store.count(COLLECTION) == PHOTOS


def test_an_oversized_shard_is_split_into_parts_of_the_shard_size(
    plan: Plan, folder: Path, settings: IndexerSettings
) -> None:
    photo_folder(folder / "more", 2 * settings.shard_size + 1 - PHOTOS)
    planned = plan(now=ticks(50.0))
    parts = [unit.to_wire() for unit in planned.units]
    assert planned.record["split"] == len(parts) == 3
    assert (parts[0]["lo"], parts[-1]["hi"]) == ("", None)
    assert planned.batches == []
    assert planned.record["finished"] == 51.0
