"""The delete guard: a sync or reindex that would delete more than max_delete_share (0.5) of the
live index is refused unless forced, and says so. Real workers, Redis, Triton and Qdrant Edge."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.jobs import Jobs
from core.jobstatus import JobStatus
from core.settings import Settings
from core.submit import queue_sync
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, open_store
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, api_settings, serving
from tests.support.indexing import (
    ApiJobs,
    WorkerProcess,
    cli,
    drop_keys,
    indexer_settings,
    tasks,
    wait_job,
)
from tests.support.scale import many_photos


@pytest.fixture
def settings(tmp_path: Path, triton: TritonServer, repository: Path) -> Iterator[Settings]:
    with indexer_settings(
        tmp_path / "data", triton.url, repository, shard_size=10, batch_size=16, cpu_chunk=16
    ) as settings:
        yield settings


def live_points(settings: Settings) -> int:
    """The live collection's size, as the worker that owns the store reports it."""
    status = cli(settings, "index", "status", "--json")
    assert status.returncode == 0, status.stderr
    [live] = [c for c in json.loads(status.stdout)["collections"] if LIVE_ALIAS in c["aliases"]]
    return int(live["points"])


def remove(root: Path, keys: Iterable[str]) -> None:
    for key in keys:
        (root / key).unlink()


def test_a_sync_of_an_emptied_folder_deletes_nothing_unless_forced(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    many_photos(root, 6)
    jobs = Jobs.from_settings(settings)
    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        assert wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker).done == 6
        # The disk is not mounted: its mount point is there, empty.
        root.rename(tmp_path / "unmounted")
        root.mkdir()
        refused = cli(settings, "index", "sync", "--source", str(root), "--wait")
        assert refused.returncode == 1, refused.stdout + worker.tail()
        assert "max_delete_share=0.5" in refused.stderr, refused.stderr
        assert "photosearch index sync --force" in refused.stderr
        job = jobs.recent(1)[0]
        assert (job.state, job.refused, job.deleted) == ("failed", True, 0), job
        assert (job.live_count, job.delete_budget) == (6, 3), job
        assert live_points(settings) == 6

        forced = cli(settings, "index", "sync", "--source", str(root), "--force", "--wait")
        assert forced.returncode == 0, forced.stderr + worker.tail()
        job = jobs.recent(1)[0]
        assert (job.state, job.force, job.refused, job.deleted) == ("done", True, False, 6), job
        assert live_points(settings) == 0


def test_a_shard_that_loses_most_photos_waits_for_the_listing_and_the_budget_spans_shards(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    keys = many_photos(root, 40, per_folder=10)  # f000/ ... f003/: four shards of 10
    folders = [[k for k in keys if k.startswith(f"f{n:03d}/")] for n in range(4)]
    jobs = Jobs.from_settings(settings)
    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
        assert (first.state, first.done, first.shards_total) == ("done", 40, 4), first
        # A folder deleted (its shard loses all) and two photos of another: 12 of 40, within
        # the budget of 20. The shard is held back until the whole listing is seen, then goes.
        remove(root, folders[1] + folders[2][:2])
        second = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
        assert (second.state, second.refused, second.deleted) == ("done", False, 12), second
        assert (second.held, second.round, second.delete_budget) == (10, 1, 20), second
        # 28 left, a budget of 14: a shard held back (10) and 5 of another (half of theirs)
        # pass it together, in whichever order they are planned.
        remove(root, folders[3] + folders[0][:5])
        third = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
        assert (third.state, third.refused, third.live_count, third.delete_budget) == (
            "failed",
            True,
            28,
            14,
        ), third
        assert third.deleted in (0, 5), third
        assert "max_delete_share=0.5" in third.message and "--force" in third.message
    store = open_store(settings)
    try:
        left = {p.photo_id for p in store.points(store.resolve(LIVE_ALIAS))}
    finally:
        store.close()
    assert set(folders[3]) <= left  # the shard held back lost nothing
    assert left == set(folders[0][third.deleted :] + folders[2][2:] + folders[3])


def finished(admin: httpx.Client, path: str, body: dict[str, Any]) -> JobStatus:
    """Start a job through the admin API and wait for its record to say it ended."""
    accepted = admin.post(path, json=body)
    assert accepted.status_code == 202, accepted.text
    return wait_job(ApiJobs(str(admin.base_url), admin.headers), accepted.json()["job_id"])


def test_a_reindex_of_a_source_that_lost_most_photos_switches_only_when_forced(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    settings = api_settings(tmp_path / "data", triton.url, repository)
    root = tmp_path / "photos"
    keys = many_photos(root, 8)
    store = open_store(settings)
    runtime = Runtime(settings, store=store)
    try:
        with (
            worker_thread(create_app(settings), runtime, queues=all_queues(settings)),
            serving(settings, store) as api,
            httpx.Client(base_url=api.url, headers={"X-API-Key": ADMIN_KEY}, timeout=30) as admin,
        ):
            synced = finished(admin, "/v1/admin/sync", {"source": str(root)})
            assert (synced.state, synced.done) == ("done", 8), synced
            live = store.resolve(LIVE_ALIAS)
            remove(root, keys[2:])

            job = finished(admin, "/v1/admin/reindex", {"model_version": 1})
            assert (job.state, job.refused, job.live_count) == ("failed", True, 8), job
            assert "max_delete_share=0.5" in job.message and "force: true" in job.message
            assert store.resolve(LIVE_ALIAS) == live and store.count(live) == 8

            job = finished(admin, "/v1/admin/reindex", {"model_version": 1, "force": True})
            assert (job.state, job.force, job.refused) == ("done", True, False), job
            switched = store.resolve(LIVE_ALIAS)
            assert switched != live and store.count(switched) == 2
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)
