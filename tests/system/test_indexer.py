"""The indexer end to end: a real `photosearch worker` process, real Redis, Triton, Qdrant Edge."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from celery.beat import PersistentScheduler

from core.embedding.arrays import Embeddings
from core.embedding.client import EmbeddingClient
from core.jobs import Jobs
from core.jobstatus import JobKind, JobState, JobStatus
from core.settings import Settings
from core.sources import LocalSource
from core.vectorstore import LIVE_ALIAS, VectorStore, open_store
from indexer.app import create_app
from model.triton_server import TritonServer
from tests.support.images import broken_files, encode, odd_files, photo, png_bomb, png_header_only
from tests.support.indexing import (
    WorkerProcess,
    cli,
    env_of,
    indexer_settings,
    photo_folder,
    tasks,
    variant,
    wait_job,
    write_manifest,
    write_photo,
)
from tests.support.waiting import wait_until


@pytest.fixture
def settings(tmp_path: Path, triton: TritonServer, repository: Path) -> Iterator[Settings]:
    with indexer_settings(
        tmp_path / "data", triton.url, repository, visibility_timeout_s=3
    ) as settings:
        yield settings


@pytest.fixture
def jobs(settings: Settings) -> Jobs:
    return Jobs.from_settings(settings)


def sync(settings: Settings, jobs: Jobs, source: str) -> str:
    from core.submit import queue_sync

    return queue_sync(tasks(settings), jobs, source)


def stored(settings: Settings) -> tuple[VectorStore, str]:
    """The store, opened by the test once the worker that owned it has stopped."""
    store = open_store(settings)
    return store, store.resolve(LIVE_ALIAS)


def listing(root: Path) -> dict[str, str]:
    return {o.key: o.version for o in LocalSource(root).list_range() if o.key != "photos.jsonl"}


def test_sync_makes_the_index_match_the_folder(
    settings: Settings, jobs: Jobs, tmp_path: Path, client: EmbeddingClient
) -> None:
    root = tmp_path / "photos"
    keys = photo_folder(root, 10)
    write_manifest(
        root, [{"path": "day2/photo000.jpg", "title": "An astronaut", "tags": ["space"]}]
    )
    log = tmp_path / "worker.log"
    with WorkerProcess(settings, log) as worker:
        first = subprocess.run(
            [sys.executable, "-m", "photosearch", "index", "sync", "--source", str(root), "--wait"],
            env=env_of(settings),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert first.returncode == 0, first.stdout + first.stderr + worker.tail()
        assert "done 10" in first.stdout

        # Add two, change one, delete one, retitle one.
        write_photo(root / "new/a.png", 20)
        write_photo(root / "new/b.webp", 21)
        (root / "day1/photo001.png").write_bytes(encode(variant(30), "PNG"))
        (root / "day1/photo003.gif").unlink()
        write_manifest(root, [{"path": "day2/photo000.jpg", "title": "Moon walk", "tags": ["a"]}])
        second = wait_job(jobs, sync(settings, jobs, str(root)), worker=worker)
        assert (second.state, second.total, second.done) == ("done", 3, 3), second
        assert (second.deleted, second.updated, second.unchanged) == (1, 1, 7), second

        status = cli(settings, "index", "status", "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["jobs"][0]["id"] == second.id
        assert report["jobs"][0]["done"] == 3 and report["jobs"][0]["eta_s"] == 0.0
        [live] = report["collections"]
        assert (live["points"], live["aliases"], live["model_version"]) == (11, [LIVE_ALIAS], 1)
        refused = cli(settings, "index", "rollback")
        assert refused.returncode == 1
        assert "nothing to roll back to" in refused.stderr
    assert worker.process is not None and worker.process.returncode == 0, worker.tail()

    store, collection = stored(settings)
    try:
        indexed = {v.photo_id: v.content_version for v in store.points(collection)}
        assert indexed == listing(root)
        assert store.count(collection) == len(keys) + 2 - 1
        [changed] = store.retrieve(collection, ["day1/photo001.png"], with_vectors=True)
        expected = await_embedding(client, root / "day1/photo001.png")
        assert changed.vector is not None
        assert float(np.dot(changed.vector, expected)) > 0.999
        [titled] = store.retrieve(collection, ["day2/photo000.jpg"])
        assert (titled.payload["title"], titled.payload["tags"]) == ("Moon walk", ["a"])
        assert titled.payload["source_uri"] == (root / "day2/photo000.jpg").as_uri()
        assert titled.payload["source_root"] == root.as_uri()  # what the API reads under
        assert titled.payload["model_version"] == 1
    finally:
        store.close()


def test_a_second_sync_joins_the_running_one_another_is_refused_an_increment_waits(
    settings: Settings, jobs: Jobs, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    keys = photo_folder(root, 12)
    # Asked before any worker runs, so the first job is certainly still running.
    first = cli(settings, "index", "sync", "--source", str(root))
    assert first.returncode == 0, first.stderr
    queued = re.search(r"job (\w+) queued", first.stdout)
    assert queued is not None, first.stdout
    job_id = queued[1]
    again = cli(settings, "index", "sync", "--source", str(root))
    assert again.returncode == 0, again.stderr
    assert f"joined the running job {job_id}" in again.stdout
    other = cli(settings, "index", "sync", "--source", str(tmp_path / "elsewhere"))
    assert other.returncode == 1
    assert f"refused: sync job {job_id} is changing the live collection" in other.stderr
    elsewhere = cli(settings, "index", "sync", "--source", "file://evil.example.com/etc")
    assert elsewhere.returncode == 2 and "a file URI names no" in elsewhere.stderr
    from core.submit import submit_sync

    # An increment waits in line behind the sync instead (cancelled here: no feed is set).
    increment = submit_sync(tasks(settings), jobs, str(root), JobKind.INCREMENT)
    assert increment.queued and not increment.refused, increment
    jobs.finish(increment.job_id, JobState.CANCELLED)
    # The refused and joined made no job.
    assert [j.id for j in jobs.recent()] == [increment.job_id, job_id]

    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        job = wait_job(jobs, job_id, worker=worker)
        assert (job.state, job.done, job.failed) == ("done", len(keys), 0), job
        # A source the CLI and API would refuse, sent straight to the task: the job ends with
        # the reason before anything is listed, remembered or deleted.
        sent = submit_sync(tasks(settings), jobs, "file://evil.example.com/etc")
        refused = wait_job(jobs, sent.job_id, worker=worker)
        assert (refused.state, refused.listed, refused.deleted) == ("failed", 0, 0), refused
        assert "names no host" in refused.message
        assert jobs.recall("source") == root.as_uri()
        # Once it has finished, the same request starts a job of its own.
        later = cli(settings, "index", "sync", "--source", str(root), "--wait")
        assert later.returncode == 0, later.stderr + worker.tail()
        own = re.search(r"job (\w+) queued", later.stdout)
        assert own is not None and own[1] != job_id, later.stdout
    store, collection = stored(settings)
    try:
        assert {v.photo_id for v in store.points(collection)} == set(keys)
    finally:
        store.close()


def await_embedding(client: EmbeddingClient, path: Path) -> Embeddings:
    """Version 1's embedding of a file, straight from Triton (own client: own event loop)."""

    async def embed() -> Embeddings:
        async with EmbeddingClient(client.url, client.repository) as own:
            vectors = await own.encode_image_bytes([path.read_bytes()], model_version=1)
        vector: Embeddings = vectors[0]
        return vector

    return asyncio.run(embed())


def test_bad_files_are_skipped_with_a_reason_and_the_rest_index(
    settings: Settings, jobs: Jobs, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    photo_folder(root, 4)
    bad = {
        "bad/zero.jpg": b"",
        "bad/truncated.jpg": broken_files()["truncated jpeg"],
        "bad/corrupt.jpg": broken_files()["corrupt jpeg"],
        "bad/text.jpg": broken_files()["text named .jpg"],
        "bad/huge.png": png_header_only(30000, 30000),
        "bad/notes.txt": b"not a photo",
        "bad/scan.pdf": b"%PDF-1.4",
        # Valid, kilobytes on disk, and 144 million pixels once inflated: past the limit.
        "bad/bomb.png": png_bomb(12_000, 12_000),
    }
    # Unusual but valid files (a PNG named .jpg, an animated GIF, CMYK, 16-bit, EXIF-rotated):
    # each is indexed like any photo.
    odd = {
        f"odd/{name}": data for name, data in odd_files(photo("coffee").resize((160, 120))).items()
    }
    for key, data in {**bad, **odd}.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        job = wait_job(jobs, sync(settings, jobs, str(root)), worker=worker)
        assert (job.state, job.done, job.skipped, job.failed) == ("done", 9, 8, 0), job
        problems = "\n".join(jobs.problems(job.id))
        for key, reason in [
            ("bad/zero.jpg", "zero bytes"),
            ("bad/truncated.jpg", "truncated"),
            ("bad/corrupt.jpg", "corrupt"),
            ("bad/text.jpg", "not an image"),
            ("bad/huge.png", "pixels"),
            ("bad/notes.txt", "unsupported file type .txt"),
            ("bad/scan.pdf", "unsupported file type .pdf"),
            ("bad/bomb.png", "pixels"),
        ]:
            assert any(key in line and reason in line for line in problems.splitlines()), (
                key,
                problems,
            )
        assert not any(key in problems for key in odd), problems
        again = wait_job(jobs, sync(settings, jobs, str(root)), worker=worker)
        assert (again.total, again.skipped, again.unchanged) == (0, 0, 17), again
    store, collection = stored(settings)
    try:
        assert store.count(collection) == 9
        assert {r.photo_id for r in store.retrieve(collection, list(odd))} == set(odd)
    finally:
        store.close()


def last_ran(settings: Settings, ago: timedelta) -> None:
    """Beat's schedule file, as beat leaves it, with the nightly sync last run `ago`."""
    app = create_app(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = str(settings.data_dir / "celerybeat-schedule")
    scheduler = PersistentScheduler(app, schedule_filename=schedule, lazy=False)
    try:
        scheduler.schedule["nightly-sync"].last_run_at = app.now() - ago
        scheduler.sync()
    finally:
        scheduler.close()


def test_beat_runs_the_nightly_sync_on_its_cron(
    settings: Settings, jobs: Jobs, tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    photo_folder(root, 3)
    settings.indexer.source = str(root)
    settings.indexer.sync_cron = "0 2 * * *"
    # Beat was down over last night's 02:00 (it last ran the sync two days ago): the run the
    # cron has due goes at once when beat starts, rather than at the next 02:00 (or, with a
    # cron of every minute, up to a minute of the test's waiting).
    last_ran(settings, timedelta(days=2))
    with (
        WorkerProcess(settings, tmp_path / "worker.log") as worker,
        (tmp_path / "beat.log").open("wb") as log,
    ):
        beat = subprocess.Popen(
            [sys.executable, "-m", "photosearch", "beat"],
            env=env_of(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:

            def queued() -> list[JobStatus]:
                assert beat.poll() is None, (tmp_path / "beat.log").read_text()
                return jobs.recent(5)

            found = wait_until(queued, 120, lambda: (tmp_path / "beat.log").read_text())
            job = wait_job(jobs, found[0].id, worker=worker)
        finally:
            beat.terminate()
            beat.wait(30)
    assert (job.kind, job.state, job.done, job.source) == ("sync", "done", 3, root.as_uri())
    assert list(settings.data_dir.glob("celerybeat-schedule*"))  # beat keeps its last runs
