"""Resume, not restart: a failed or cancelled reindex's collection holds the room until it is
resumed or dropped; resume and cancel through the CLI and the admin API; each collection's
role as `index collections` shows it.

No worker takes the tasks sent here: they are read off the real Redis queue, except where a
test starts one to answer `index collections` and `index drop`. No Triton: nothing embeds.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from core.collectionroles import drop_command, resume_command
from core.embedding.manifest import ImagePreprocessing, ModelManifest, TokenizerSpec, write_manifest
from core.jobs import LIVE_LOCK, REINDEX_LOCK, Jobs
from core.jobstatus import JobKind, JobPhase, JobState, JobStatus
from core.settings import Settings
from core.submit import room_holder, submit_reindex, submit_resume
from core.taskqueue import REINDEX, RESUME, control_queue
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    PhotoPoint,
    VectorStore,
    collection_name,
    open_store,
)
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.plan.shards import ShardRange
from indexer.queue.messages import ShardUnit
from indexer.queue.workqueue import WorkQueue
from indexer.runtime import Runtime
from tests.support.api import ADMIN_KEY, SEARCH_KEY, api_settings, own_store, serving
from tests.support.indexing import cli, drop_keys, settings_for, tasks

ADMIN = {"X-API-Key": ADMIN_KEY}
NO_TRITON = "127.0.0.1:9"  # nothing listens there


@dataclass
class Site:
    settings: Settings
    jobs: Jobs
    store: VectorStore
    admin: httpx.Client
    search: httpx.Client
    photos: Path


def exported(repository: Path, version: int) -> None:
    """A model version's manifest: what the admin API checks before a reindex."""
    repository.mkdir(parents=True, exist_ok=True)
    write_manifest(
        repository,
        ModelManifest(
            version=version,
            arch="tiny",
            arch_config={},
            weights="random",
            embedding_dim=4,
            image=ImagePreprocessing(size=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
            tokenizer=TokenizerSpec(context_length=16, sot_id=1, eot_id=2),
            target="cpu",
            files={},
            exported_at="2026-01-01T00:00:00+00:00",
            exporter={},
        ),
    )


@pytest.fixture(scope="module")
def api_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The real app over an empty store, Triton unreachable, model version 2 exported."""
    tmp = tmp_path_factory.mktemp("resume")
    settings = api_settings(tmp / "data", NO_TRITON, tmp / "models")
    exported(tmp / "models", 2)
    (tmp / "photos").mkdir()
    jobs = Jobs.from_settings(settings)
    with (
        own_store(settings) as store,
        serving(settings, store) as server,
        httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as admin,
        httpx.Client(base_url=server.url, headers={"X-API-Key": SEARCH_KEY}) as search,
    ):
        yield Site(settings, jobs, store, admin, search, tmp / "photos")
    jobs.redis.close()


@pytest.fixture
def site(api_site: Site) -> Site:
    """The app with no job record, lock or task of an earlier test."""
    redis = api_site.jobs.redis
    prefix = api_site.settings.redis.prefix
    redis.delete(control_queue(api_site.settings), *redis.scan_iter(f"{prefix}:*"))
    return api_site


def sent(settings: Settings) -> list[tuple[str, list[Any]]]:
    """The tasks waiting in the control queue, oldest first: (name, args)."""
    redis = Jobs.from_settings(settings).redis
    try:
        raw: list[bytes] = redis.lrange(control_queue(settings), 0, -1)  # type: ignore[assignment]
    finally:
        redis.close()
    messages = [json.loads(item) for item in reversed(raw)]  # pushed on the left
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def started(settings: Settings, jobs: Jobs, source: Path) -> str:
    """A new reindex of model version 2, as an operator asks for it."""
    submitted = submit_reindex(tasks(settings), jobs, 2, source.as_uri())
    assert not submitted.refused and not submitted.joined, submitted
    return submitted.job_id


def ended(jobs: Jobs, job_id: str, state: JobState = JobState.FAILED) -> JobStatus:
    """The job as a worker leaves it: its collection made, then failed (or cancelled)."""
    job = jobs.get(job_id)
    assert job is not None
    collection = collection_name(job.model_version, job_id)
    jobs.start(job_id, state=JobState.RUNNING, phase=JobPhase.LOAD, collection=collection)
    jobs.finish(job_id, state, "TritonUnavailable: no answer past the retry budget")
    done = jobs.get(job_id)
    assert done is not None
    return done


def test_a_new_reindex_is_refused_beside_a_failed_ones_collection(site: Site) -> None:
    failed = ended(site.jobs, started(site.settings, site.jobs, site.photos))
    before, ids = sent(site.settings), [job.id for job in site.jobs.recent()]
    resume = f"`photosearch index reindex --resume {failed.id}`"
    drop = f"`photosearch index drop {failed.collection}`"

    answer = site.admin.post(
        "/v1/admin/reindex", json={"model_version": 2, "source": str(site.photos)}
    )
    assert answer.status_code == 409, answer.text
    message = answer.json()["message"]
    assert f"reindex job {failed.id} (model version 2) failed" in message
    assert resume in message and drop in message

    refused = cli(
        site.settings, "index", "reindex", "--model-version", "2", "--source", str(site.photos)
    )
    assert refused.returncode == 1, refused.stderr
    assert resume in refused.stderr and drop in refused.stderr

    assert [job.id for job in site.jobs.recent()] == ids  # no job record was made
    assert sent(site.settings) == before  # nor any task sent
    assert site.jobs.lock_holder(REINDEX_LOCK) is None


def test_resume_through_the_api_queues_the_job_under_the_reindex_lock(site: Site) -> None:
    failed = ended(site.jobs, started(site.settings, site.jobs, site.photos))
    path = f"/v1/admin/reindex/{failed.id}/resume"
    assert site.search.post(path).status_code == 403  # the admin scope, as the other routes
    missing = site.admin.post("/v1/admin/reindex/nosuchjob/resume")
    assert missing.status_code == 404, missing.text

    answer = site.admin.post(path)

    assert answer.status_code == 202, answer.text
    assert answer.json()["job_id"] == failed.id
    assert answer.json()["status_url"] == f"/v1/admin/jobs/{failed.id}"
    job = site.jobs.get(failed.id)
    assert job is not None
    assert (job.state, job.finished_at, job.collection) == ("queued", 0.0, failed.collection)
    assert "resumed by an operator" in job.message
    assert site.jobs.lock_holder(REINDEX_LOCK) == failed.id
    assert sent(site.settings)[-1] == (RESUME, [failed.id])
    # Asked twice: the first is waiting for a worker. The same reindex asked anew joins it.
    again = site.admin.post(path)
    assert again.status_code == 409 and "is queued" in again.json()["message"]
    same = site.admin.post(
        "/v1/admin/reindex", json={"model_version": 2, "source": str(site.photos)}
    )
    assert same.status_code == 202, same.text
    assert (same.json()["job_id"], same.json()["joined"]) == (failed.id, True)
    assert [name for name, _ in sent(site.settings)] == [REINDEX, RESUME]


def test_resume_is_refused_for_a_sync_a_done_reindex_and_beside_a_running_one(
    site: Site,
) -> None:
    sync = site.jobs.create(JobKind.SYNC, source=site.photos.as_uri())
    done = started(site.settings, site.jobs, site.photos)
    site.jobs.finish(done, JobState.DONE, "switched")
    refusals = {
        job_id: site.admin.post(f"/v1/admin/reindex/{job_id}/resume") for job_id in (sync, done)
    }
    assert {r.status_code for r in refusals.values()} == {409}
    assert f"job {sync} is a sync, not a reindex" in refusals[sync].json()["message"]
    assert f"reindex job {done} is done" in refusals[done].json()["message"]

    failed = ended(site.jobs, started(site.settings, site.jobs, site.photos))
    # A reindex of a release before the room rule, still running beside it.
    running = site.jobs.create(JobKind.REINDEX, model_version=3)
    assert site.jobs.claim_lock(REINDEX_LOCK, running) is None
    site.jobs.start(running, state=JobState.RUNNING, collection=collection_name(3, running))
    before = sent(site.settings)

    answer = site.admin.post(f"/v1/admin/reindex/{failed.id}/resume")

    assert answer.status_code == 409, answer.text
    assert f"reindex job {running} (model version 3) is running" in answer.json()["message"]
    job = site.jobs.get(failed.id)
    assert job is not None and job.state == "failed"  # left as it was
    assert site.jobs.lock_holder(REINDEX_LOCK) == running
    assert sent(site.settings) == before


def test_a_reindex_the_delete_guard_refused_gives_way_to_a_forced_one(site: Site) -> None:
    refused = started(site.settings, site.jobs, site.photos)
    site.jobs.update(refused, refused=1)  # as indexer/plan/deleteguard.py ends it, work dropped
    ended(site.jobs, refused)

    resume = site.admin.post(f"/v1/admin/reindex/{refused}/resume")
    assert resume.status_code == 409, resume.text
    assert "refused by the delete guard" in resume.json()["message"]
    forced = site.admin.post(
        "/v1/admin/reindex", json={"model_version": 2, "source": str(site.photos), "force": True}
    )
    assert forced.status_code == 202, forced.text
    assert forced.json()["job_id"] != refused
    assert sent(site.settings)[-1] == (REINDEX, [forced.json()["job_id"], 2, site.photos.as_uri()])


def test_a_paused_reindex_resumes_in_its_state_under_its_own_lock(site: Site) -> None:
    paused = started(site.settings, site.jobs, site.photos)
    site.jobs.update(paused, state=JobState.PAUSED, resume_state=JobState.RUNNING)

    submitted = submit_resume(tasks(site.settings), site.jobs, paused)

    assert (submitted.job_id, submitted.refused) == (paused, "")
    job = site.jobs.get(paused)
    assert job is not None and job.state == "paused"  # the worker decides how it goes on
    assert site.jobs.lock_holder(REINDEX_LOCK) == paused
    assert sent(site.settings)[-1] == (RESUME, [paused])


def test_cancel_keeps_a_reindexs_work_to_resume_and_drops_a_syncs(site: Site) -> None:
    work = WorkQueue(site.jobs.redis, site.settings.redis.prefix)
    reindex = started(site.settings, site.jobs, site.photos)
    site.jobs.start(reindex, state=JobState.RUNNING, collection=collection_name(2, reindex))
    sync = site.jobs.create(JobKind.SYNC, source=site.photos.as_uri())
    assert site.jobs.claim_lock(LIVE_LOCK, sync) is None
    site.jobs.start(sync, state=JobState.RUNNING)
    for job_id in (reindex, sync):
        work.start_round(job_id, 0, [ShardUnit(ShardRange("s0")), ShardUnit(ShardRange("s1"))])

    cancelled = cli(site.settings, "index", "cancel", reindex)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"photosearch index reindex --resume {reindex}" in cancelled.stdout
    job = site.jobs.get(reindex)
    assert job is not None
    assert (job.state, job.message) == ("cancelled", "cancelled by an operator")
    assert work.backlog(reindex)["shards"] == 2
    assert site.jobs.lock_holder(REINDEX_LOCK) is None

    refused = cli(
        site.settings, "index", "reindex", "--model-version", "2", "--source", str(site.photos)
    )
    assert refused.returncode == 1
    assert f"reindex job {reindex} (model version 2) was cancelled" in refused.stderr
    resumed = cli(site.settings, "index", "reindex", "--resume", reindex)
    assert resumed.returncode == 0, resumed.stderr
    assert f"reindex job {reindex} resumed" in resumed.stdout
    assert site.jobs.lock_holder(REINDEX_LOCK) == reindex
    assert sent(site.settings)[-1] == (RESUME, [reindex])
    unknown = cli(site.settings, "index", "reindex", "--resume", "nosuchjob")
    assert unknown.returncode == 2 and "no job nosuchjob" in unknown.stderr

    assert cli(site.settings, "index", "cancel", sync).returncode == 0
    job = site.jobs.get(sync)
    assert job is not None and job.state == "failed"
    assert work.backlog(sync)["shards"] == 0


def point(i: int) -> PhotoPoint:
    vector = np.eye(4, dtype=np.float32)[i % 4]
    return PhotoPoint(f"p{i}.jpg", vector, {"photo_id": f"p{i}.jpg"})


def made(store: VectorStore, name: str, points: int) -> str:
    store.create_collection(name, 4)
    store.upsert(name, [point(i) for i in range(points)])
    return name


def test_the_admin_api_lists_each_collection_with_its_role_and_age(site: Site) -> None:
    failed = ended(site.jobs, started(site.settings, site.jobs, site.photos))
    orphan = collection_name(2, "stray")
    for name, points in ((failed.collection, 2), (orphan, 1)):
        made(site.store, name, points)
    try:
        answer = site.admin.get("/v1/admin/collections")
    finally:
        for name in (failed.collection, orphan):
            site.store.drop_collection(name)
    assert answer.status_code == 200, answer.text
    found = {c["name"]: c for c in answer.json()}
    assert (found[failed.collection]["role"], found[orphan]["role"]) == ("failed", "orphan")
    mine = found[failed.collection]
    assert (mine["job_id"], mine["job_state"], mine["points"]) == (failed.id, "failed", 2)
    assert mine["created_at"] == failed.created_at and mine["age_s"] >= 0
    assert (found[orphan]["job_id"], found[orphan]["age_s"]) == ("", None)


def test_index_collections_shows_each_role_and_a_drop_frees_the_room(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "data", NO_TRITON, tmp_path / "models")
    jobs = Jobs.from_settings(settings)
    store = open_store(settings)
    runtime = Runtime(settings, store=store)
    try:
        sync = jobs.create(JobKind.SYNC)
        live = made(store, collection_name(1, sync), 3)
        jobs.start(sync, collection=live)
        jobs.finish(sync, JobState.DONE)
        previous = made(store, collection_name(1, "before"), 2)  # its record has expired
        store.set_aliases({LIVE_ALIAS: live, PREVIOUS_ALIAS: previous})
        failed = ended(jobs, started(settings, jobs, tmp_path))
        jobs.redis.delete(control_queue(settings))  # no worker is to start it
        made(store, failed.collection, 5)
        orphan = made(store, collection_name(2, "stray"), 1)

        with worker_thread(create_app(settings), runtime, queues=[control_queue(settings)]):
            listed = cli(settings, "index", "collections", "--json")
            text = cli(settings, "index", "collections")
            dropped = cli(settings, "index", "drop", failed.collection)

        assert listed.returncode == 0, listed.stderr
        found = {c["name"]: c for c in json.loads(listed.stdout)}
        roles = {name: c["role"] for name, c in found.items()}
        assert roles == {
            live: "live",
            previous: "previous",
            failed.collection: "failed",
            orphan: "orphan",
        }
        assert (found[failed.collection]["points"], found[failed.collection]["job_id"]) == (
            5,
            failed.id,
        )
        assert found[failed.collection]["age_s"] >= 0 and found[orphan]["age_s"] is None
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(failed.collection))
        assert "failed" in lines[at] and "5 photos" in lines[at]
        assert lines[at + 1].split() == ["resume:", *resume_command(failed.id).split()]
        assert lines[at + 2].split() == ["drop:", *drop_command(failed.collection).split()]
        assert dropped.returncode == 0, dropped.stderr
        job = jobs.get(failed.id)
        assert job is not None and job.dropped
        assert room_holder(jobs) is None  # a new reindex may start
        gone = submit_resume(tasks(settings), jobs, failed.id)
        assert f"collection {failed.collection} was dropped" in gone.refused
        assert not store.has_collection(failed.collection)
    finally:
        runtime.close()
        store.close()
        jobs.redis.close()
        drop_keys(settings)
