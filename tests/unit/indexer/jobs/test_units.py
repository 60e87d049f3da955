"""The plan task's units (indexer/jobs/units.py): each kind is planned by its planner with the
parts of the worker's Runtime, and committed once under the unit's id. On the folder of tiny
photos and the in-process store; no Triton is reached (nothing here embeds)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.jobstatus import JobKind, JobState, JobStatus
from core.settings import ModelSettings, RedisSettings, Settings
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import VectorStore
from indexer.jobs.units import commit, plan_unit
from indexer.plan.deleteguard import open_budget
from indexer.plan.shards import ShardRange
from indexer.queue.messages import GroupUnit, ReplayUnit, ShardUnit
from indexer.runtime import Runtime
from tests.unit.indexer.conftest import COLLECTION, PHOTOS


@pytest.fixture
def runtime(
    tmp_path: Path, redis_url: str, store: VectorStore, source: LocalSource
) -> Iterator[Runtime]:
    """A worker's Runtime over the test's store, folder and a Redis prefix of its own."""
    (tmp_path / "models").mkdir()
    settings = Settings(
        data_dir=tmp_path,
        model=ModelSettings(repository=tmp_path / "models"),
        redis=RedisSettings(url=redis_url, prefix=f"units-{uuid.uuid4().hex}"),
        indexer=IndexerSettings(batch_size=4, shard_size=10),
    )
    rt = Runtime(settings, store=store, sources={source.uri: source})
    try:
        yield rt
    finally:
        rt.close()


@pytest.fixture
def running(runtime: Runtime, source: LocalSource) -> JobStatus:
    """A running sync of the folder into the test's collection."""
    job_id = runtime.jobs.create(JobKind.SYNC, source=source.uri)
    runtime.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    open_budget(runtime.jobs, job_id, PHOTOS, 0.5)
    job = runtime.jobs.get(job_id)
    assert job is not None
    return job


def test_a_shard_unit_is_planned_by_listing_its_shard(runtime: Runtime, running: JobStatus) -> None:
    planned = plan_unit(runtime, running, ShardUnit(ShardRange("")), "w1")
    assert (planned.record["label"], planned.record["photos"]) == ("", PHOTOS)
    assert sum(len(batch.photos) for batch in planned.batches) == PHOTOS


def test_a_replay_unit_plans_its_keys_and_a_group_unit_groups_its_shard(
    runtime: Runtime, running: JobStatus, source: LocalSource
) -> None:
    keys = sorted(obj.key for obj in source.list_range())[:2]
    replayed = plan_unit(runtime, running, ReplayUnit("replay:0", tuple(keys)), "w1")
    assert replayed.record["keys"] == 2
    assert sorted(photo.key for batch in replayed.batches for photo, _ in batch.photos) == keys
    grouped = plan_unit(runtime, running, GroupUnit(ShardRange("")), "w1")
    assert (grouped.record["photos"], grouped.counts) == (0, {"regrouped": 0})


def test_a_unit_s_plan_is_committed_once_under_its_id(runtime: Runtime, running: JobStatus) -> None:
    unit = ShardUnit(ShardRange(""))
    runtime.work.start_round(running.id, 0, [unit])
    tokens = runtime.work.reserve(
        running.id, max_embed=0, max_plan=1, plan_ahead=8, ttl_s=60, lease_s=60
    )
    [token] = tokens.plan
    assert runtime.work.claim_unit(running.id, token) == unit
    planned = plan_unit(runtime, running, unit, "w1")
    assert not commit(runtime, running.id, token, unit.id, planned)
    assert list(runtime.work.planned(running.id)) == [unit.id]
    assert runtime.work.backlog(running.id)["batches"] == len(planned.batches) == 2
