"""The indexer at scale, small: a bounded broker, planning killed and resumed, parallel planners.

Real `photosearch worker` processes, real Redis, Triton and Qdrant Edge; the parallel-planning
test runs two worker processes over one store, which needs a Qdrant server: it cannot run here,
so qdrant-client's local mode stands in for it, served over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobStatus
from core.settings import Settings
from core.submit import queue_sync, submit_reindex
from core.taskqueue import control_queue, embed_queue, plan_queue
from core.vectorstore import LIVE_ALIAS, VectorStore, model_version_of, open_store
from harness.observe import QueueWatch
from harness.photos import small_photo
from indexer.plan.shards import ShardMap
from indexer.queue.workqueue import WorkQueue
from model.triton_server import TritonServer
from tests.support.indexing import WorkerProcess, indexer_settings, tasks, wait_job
from tests.support.qdrant_server import qdrant_stand_in
from tests.support.scale import image_inferences, many_photos
from tests.support.waiting import wait_until


@pytest.fixture
def settings(tmp_path: Path, triton: TritonServer, repository: Path) -> Iterator[Settings]:
    with indexer_settings(tmp_path / "data", triton.url, repository) as settings:
        yield settings


def assert_indexed_once(store: VectorStore, keys: list[str]) -> None:
    """Every photo of the folder has exactly one point, and nothing else has one."""
    collection = store.resolve(LIVE_ALIAS)
    ids = [p.photo_id for p in store.points(collection)]
    assert len(ids) == len(set(ids)) == store.count(collection) == len(keys)
    assert set(ids) == set(keys)


def test_a_sync_of_20000_photos_never_queues_more_than_its_room(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    keys = many_photos(root, 20_000)
    settings.indexer.batch_size = 16
    settings.indexer.max_queued_batches = 4
    settings.indexer.shard_size = 1000
    settings.indexer.cpu_chunk = 16
    jobs = Jobs.from_settings(settings)
    seen: list[JobStatus] = []  # the job as `index status` showed it along the way
    with (
        QueueWatch(settings.redis.url, embed_queue(settings)) as embed,
        QueueWatch(settings.redis.url, plan_queue(settings)) as plan,
        WorkerProcess(settings, tmp_path / "worker.log", concurrency=4) as worker,
    ):
        job_id = queue_sync(tasks(settings), jobs, str(root))

        def watched(now: JobStatus) -> bool:
            seen.append(now)
            return now.state in FINISHED

        job = wait_job(jobs, job_id, 900, worker, until=watched)
    assert (job.state, job.done, job.failed, job.skipped) == ("done", 20_000, 0, 0), job
    assert (job.listed, job.batches_total, job.shards_planned) == (
        20_000,
        20 * 63,
        job.shards_total,
    )
    # 20 shards of 1000: the first sync of a catalogue is one shard, split as it is listed.
    assert job.shards_total == 20, job
    print(f"embed queue: longest {embed.longest} of {embed.samples} looks; plan: {plan.longest}")
    assert 1 <= embed.longest <= settings.indexer.max_queued_batches
    assert plan.longest <= settings.indexer.planners
    # While shards were still being planned, the record said how far it was: photos known,
    # done, a rate, and an ETA from the total extrapolated over the shards to plan.
    planning = [s for s in seen if s.planning and s.done and s.shards_planned]
    assert planning, [(s.shards_planned, s.shards_total, s.done) for s in seen[::50]]
    assert all(s.listed and s.images_per_s > 0 and s.eta_s is not None for s in planning)
    assert all(s.total <= s.estimated_total <= 24_000 for s in planning), planning[-1]
    store = open_store(settings)
    try:
        assert_indexed_once(store, keys)
    finally:
        store.close()


def test_a_shard_grown_past_twice_its_size_is_split_and_its_points_relabelled(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    keys = many_photos(root, 100, per_folder=100)  # f000/p000000.jpg ... f000/p000099.jpg
    settings.indexer.batch_size = 16
    settings.indexer.shard_size = 50
    settings.indexer.cpu_chunk = 16
    jobs = Jobs.from_settings(settings)
    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
        # 100 photos fit one shard of 50 (a shard is split past twice its size).
        assert (first.state, first.done, first.shards_total) == ("done", 100, 1), first
        # 120 photos whose keys sort before every other: the shard grows to 220.
        added = []
        for n in range(120):
            (root / "e").mkdir(exist_ok=True)
            (root / "e" / f"{n:03d}.jpg").write_bytes(small_photo(1000 + n))
            added.append(f"e/{n:03d}.jpg")
        second = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
        assert (second.state, second.done, second.unchanged) == ("done", 120, 100), second
    every = sorted(added + keys)  # the shard's keys, cut every 50
    store = open_store(settings)
    try:
        assert_indexed_once(store, keys + added)
        collection = store.resolve(LIVE_ALIAS)
        sizes = store.shard_sizes(collection)
        assert sizes == {"": 50, every[50]: 50, every[100]: 50, every[150]: 50, every[200]: 20}
        # The points indexed before the split, as well as the new ones, carry their part's label.
        shards = ShardMap(sizes)
        wrong = [p for p in store.points(collection) if p.shard != shards.label_of(p.key)]
        assert not wrong, wrong[:5]
    finally:
        store.close()


def wait_until_planning(work: WorkQueue, jobs: Jobs, job_id: str, worker: WorkerProcess) -> int:
    """Until a shard is claimed and not yet committed (a planner in the middle of it), after
    some shards were planned; returns how many were."""

    def planning() -> int | None:
        job = jobs.get(job_id)
        if job is not None and job.shards_planned >= 2 and work.backlog(job_id)["planning"]:
            return job.shards_planned
        return None

    # Polled often: a shard's planning is over in moments.
    return wait_until(planning, 120, lambda: f"{jobs.get(job_id)}\n{worker.tail()}", every_s=0.002)


def test_a_worker_killed_in_the_middle_of_planning_loses_nothing_and_embeds_nothing_twice(
    settings: Settings, tmp_path: Path, triton: TritonServer
) -> None:
    root = tmp_path / "photos"
    keys = many_photos(root, 3000)
    settings.indexer.batch_size = 16
    settings.indexer.shard_size = 300  # 10 shards, each ~19 batches
    settings.indexer.max_queued_batches = 100  # room enough that planning never waits
    settings.indexer.visibility_timeout_s = 10  # the killed worker's tokens come back in 10 s
    settings.indexer.cpu_chunk = 16
    jobs = Jobs.from_settings(settings)
    work = WorkQueue(jobs.redis, settings.redis.prefix)
    before = image_inferences(triton.url)
    log = tmp_path / "worker.log"
    # A worker that only plans (no embedding yet), killed while it holds a shard half-planned.
    planner = WorkerProcess(settings, log, queues=[control_queue(settings), plan_queue(settings)])
    planner.start()
    job_id = queue_sync(tasks(settings), jobs, str(root))
    planned = wait_until_planning(work, jobs, job_id, planner)
    planner.kill()
    killed = jobs.get(job_id)
    assert killed is not None and killed.planning and killed.done == 0, killed
    with WorkerProcess(settings, log, concurrency=4) as worker:
        job = wait_job(jobs, job_id, timeout_s=300, worker=worker)
    assert (job.state, job.done, job.failed, job.total) == ("done", 3000, 0, 3000), job
    assert job.batches_total == job.batches_done == 10 * 19, job  # no shard's batches twice
    # Triton embedded each photo once: nothing planned twice, nothing lost.
    assert image_inferences(triton.url) - before == 3000
    print(f"killed after {planned} of {killed.shards_total} shards, one half-planned")
    store = open_store(settings)
    try:
        assert_indexed_once(store, keys)
    finally:
        store.close()


def test_two_workers_plan_the_shards_of_one_job_in_parallel(
    tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    """Two `photosearch worker` processes over one store: a Qdrant server as production runs
    it, here qdrant-client's local mode served over Qdrant's REST API
    (tests/support/qdrant_server.py)."""
    root = tmp_path / "photos"
    keys = many_photos(root, 2000, per_folder=100)
    with (
        qdrant_stand_in() as qdrant_url,
        indexer_settings(
            tmp_path / "data",
            triton.url,
            repository,
            batch_size=16,
            shard_size=50,
            cpu_chunk=16,
            max_queued_batches=50,
        ) as settings,
    ):
        settings.qdrant.url = qdrant_url
        jobs = Jobs.from_settings(settings)
        with (
            WorkerProcess(settings, tmp_path / "one.log", name="one") as one,
            WorkerProcess(settings, tmp_path / "two.log", name="two"),
        ):
            # The first sync splits one shard of everything; the second, a full sync of a
            # known catalogue, plans its 40 shards from the start.
            assert (
                wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=one).done
                == 2000
            )
            second = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=one)
        assert (second.state, second.unchanged, second.shards_total) == ("done", 2000, 40)
        records = WorkQueue(jobs.redis, settings.redis.prefix).planned(second.id)
        by_worker: dict[str, list[tuple[float, float]]] = {}
        for record in records.values():
            name = record["worker"].split("@")[0].split("-")[0]
            by_worker.setdefault(name, []).append((record["started"], record["finished"]))
        assert set(by_worker) == {"one", "two"}, by_worker.keys()
        overlaps = sum(
            1 for a0, a1 in by_worker["one"] for b0, b1 in by_worker["two"] if a0 < b1 and b0 < a1
        )
        print(
            f"shards planned per worker {[len(v) for v in by_worker.values()]}; {overlaps} overlaps"
        )
        assert overlaps > 0
        store = open_store(settings)
        try:
            assert_indexed_once(store, keys)
        finally:
            store.close()


def test_a_reindex_into_a_server_builds_its_index_once_after_the_load(
    tmp_path: Path, two_versions: tuple[Path, TritonServer]
) -> None:
    """Qdrant's advice for a bulk load: HNSW graphs off (m=0) while every photo is written,
    built once before the switch. Local mode ignores HNSW settings, so the stand-in's log of
    requests is what shows it."""
    repository, triton = two_versions
    root = tmp_path / "photos"
    keys = many_photos(root, 400, per_folder=100)
    requests: list[tuple[str, str, Any]] = []
    with (
        qdrant_stand_in(requests) as qdrant_url,
        indexer_settings(
            tmp_path / "data", triton.url, repository, batch_size=16, shard_size=100
        ) as settings,
    ):
        settings.qdrant.url = qdrant_url
        settings.indexer.model_version = 1
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log", concurrency=4) as worker:
            assert (
                wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker).done
                == 400
            )
            started = len(requests)
            submitted = submit_reindex(tasks(settings), jobs, 2, str(root))
            job = wait_job(jobs, submitted.job_id, timeout_s=300, worker=worker)
        # Round 0 the load, 1 the grouping pass, 2 a catch-up with no change logged, 3 the
        # drain at the switch: nothing replayed.
        assert (job.state, job.done, job.round, job.replayed) == ("done", 400, 3, 0), job
        new = job.collection
        asked = [(verb, path, body) for verb, path, body in requests[started:]]

        def at(verb: str, path: str) -> list[int]:
            return [n for n, (v, p, _) in enumerate(asked) if (v, p) == (verb, path)]

        [create] = at("PUT", f"/collections/{new}")
        assert asked[create][2].hnsw_config.m == 0
        [build] = at("PATCH", f"/collections/{new}")
        assert asked[build][2].hnsw_config.m == settings.qdrant.hnsw_m
        loads = at("PUT", f"/collections/{new}/points")
        written = sum(len(asked[n][2].points) for n in loads)
        assert written == 400 and max(loads) < build  # every photo, all before the build
        switches = at("POST", "/collections/aliases")
        assert switches and min(switches) > build  # built before searches move to it
        # Near-duplicates are searched for with the index only: the load searched nothing.
        searches = at("POST", f"/collections/{new}/points/query/batch")
        assert searches and min(searches) > build
        store = open_store(settings)
        try:
            assert store.resolve(LIVE_ALIAS) == new
            assert_indexed_once(store, keys)
        finally:
            store.close()


def test_a_reindex_whose_worker_is_killed_resumes_and_embeds_no_batch_twice(
    tmp_path: Path, two_versions: tuple[Path, TritonServer]
) -> None:
    repository, triton = two_versions
    root = tmp_path / "photos"
    keys = many_photos(root, 600, per_folder=100)
    with indexer_settings(
        tmp_path / "data",
        triton.url,
        repository,
        batch_size=8,
        shard_size=100,
        model_version=1,
        visibility_timeout_s=5,  # the killed worker's tokens come back in seconds
    ) as settings:
        jobs = Jobs.from_settings(settings)
        log = tmp_path / "worker.log"
        with WorkerProcess(settings, log) as worker:
            assert (
                wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker).done
                == 600
            )
        before = image_inferences(triton.url)
        job_id = submit_reindex(tasks(settings), jobs, 2, str(root)).job_id
        worker = WorkerProcess(settings, log, concurrency=2).start()
        wait_until(  # polled often: the kill is to land in the middle of the load
            lambda: getattr(jobs.get(job_id), "done", 0) >= 200,
            120,
            lambda: f"{jobs.get(job_id)}\n{worker.tail()}",
            every_s=0.005,
        )
        worker.kill()  # SIGKILL in the middle of the load
        with WorkerProcess(settings, log, concurrency=2) as restarted:
            job = wait_job(jobs, job_id, timeout_s=300, worker=restarted)
        assert (job.state, job.done, job.failed, job.total) == ("done", 600, 0, 600), job
        assert job.batches_done == job.batches_total == 6 * 13, job  # 100 photos: 13 batches
        # What was done before the kill was not embedded again: at most the batches in hand
        # when it died (two threads, 8 photos each) are.
        again = image_inferences(triton.url) - before - 600
        print(f"photos embedded again after the kill: {again}")
        assert 0 <= again <= 2 * 8
        store = open_store(settings)
        try:
            assert model_version_of(store.resolve(LIVE_ALIAS)) == 2
            assert_indexed_once(store, keys)
        finally:
            store.close()
