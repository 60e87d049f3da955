"""Near-duplicate groups kept by the indexer: a real `photosearch worker`, real Redis and Triton,
Qdrant Edge or a Qdrant server's stand-in; and the calibration benchmark, run tiny."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.embedding.client import EmbeddingClient
from core.jobs import Jobs
from core.jobstatus import JobPhase, JobStatus
from core.payload import PhotoPayload
from core.settings import Settings
from core.submit import queue_sync, submit_reindex
from core.taskqueue import all_queues
from core.vectorstore import GROUP_FIELD, LIVE_ALIAS, PhotoPoint, VectorStore, open_store
from harness.photos import ALTERATIONS
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.deployfiles import ROOT
from tests.support.images import encode, photo
from tests.support.indexing import (
    WorkerProcess,
    indexer_settings,
    tasks,
    wait_idle,
    wait_job,
    write_manifest,
)
from tests.support.qdrant_server import qdrant_stand_in

# The tests' tiny model has random weights: it tells photos apart far less than CLIP does.
# `python -m loadtests.bench_duplicates --repository <the tests' export>` measured it on these
# photos: distinct photos at cosines up to 0.978 (chelsea and coffee 0.992), their copies by
# JPEG re-encoding and downscaling at 0.9996 or more to their original. Between the two:
THRESHOLD = 0.999

# File -> (photo, alteration or None for the photo itself).
Files = dict[str, tuple[str, str | None]]
FIRST: Files = {
    "astronaut.png": ("astronaut", None),
    "astronaut_q70.jpg": ("astronaut", "jpeg70"),
    "astronaut_small.png": ("astronaut", "resize50"),
    "chelsea.png": ("chelsea", None),
    "coins.png": ("coins", None),
    "rocket.png": ("rocket", None),
    "rocket_q30.jpg": ("rocket", "jpeg30"),
    "rocket_tiny.png": ("rocket", "resize25"),
}
LATER: Files = {
    "coins_q70.jpg": ("coins", "jpeg70"),
    "chelsea_small.png": ("chelsea", "resize50"),
}
# What rocket.png becomes: another photo altogether.
CHANGED: tuple[str, str | None] = ("coffee", None)


def image_file(name: str, alteration: str | None) -> bytes:
    image = photo(name).convert("RGB")
    return encode(image, "PNG") if alteration is None else ALTERATIONS[alteration](image)


def write(root: Path, files: Files) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for key, (name, alteration) in files.items():
        (root / key).write_bytes(image_file(name, alteration))


@pytest.fixture(params=["edge", "server"])
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, triton: TritonServer, repository: Path
) -> Iterator[Settings]:
    # One batch for the first sync: its near-duplicates are grouped within the batch.
    with indexer_settings(
        tmp_path / "data", triton.url, repository, batch_size=16, duplicate_threshold=THRESHOLD
    ) as settings:
        if request.param == "edge":
            yield settings
            return
        with qdrant_stand_in() as url:
            settings.qdrant.url = url
            yield settings


def synced(settings: Settings, root: Path, log: Path) -> JobStatus:
    """A sync of the folder by a worker that has stopped when it returns (Qdrant Edge has one
    owner: the test reads the store then)."""
    jobs = Jobs.from_settings(settings)
    with WorkerProcess(settings, log) as worker:
        job = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
    assert (job.state, job.failed, job.skipped) == ("done", 0, 0), job
    return job


def groups_in(store: VectorStore, collection: str) -> dict[str, str | None]:
    """Photo id -> its near-duplicate group, of every photo of a collection."""
    ids = [p.photo_id for p in store.points(collection)]
    return {p.photo_id: p.payload.get(GROUP_FIELD) for p in store.retrieve(collection, ids)}


def groups(settings: Settings) -> dict[str, str | None]:
    """Photo id -> its near-duplicate group, of every photo of the live collection."""
    store = open_store(settings)
    try:
        return groups_in(store, store.resolve(LIVE_ALIAS))
    finally:
        store.close()


def forget_group(settings: Settings, photo_id: str) -> None:
    """Rewrite a point as a release before groups wrote it: without GROUP_FIELD."""
    store = open_store(settings)
    try:
        collection = store.resolve(LIVE_ALIAS)
        [stored] = store.retrieve(collection, [photo_id], with_vectors=True)
        assert stored.vector is not None
        payload: PhotoPayload = {**stored.payload}
        payload.pop(GROUP_FIELD, None)
        store.upsert(collection, [PhotoPoint(photo_id, stored.vector, payload)])
    finally:
        store.close()


def test_copies_share_their_original_s_group_through_deletes_changes_and_retitles(
    settings: Settings, tmp_path: Path
) -> None:
    root, log = tmp_path / "photos", tmp_path / "worker.log"
    write(root, FIRST)
    assert synced(settings, root, log).done == len(FIRST)
    # Written in key order in one batch: each group is named by its first photo.
    assert groups(settings) == {
        "astronaut.png": "astronaut.png",
        "astronaut_q70.jpg": "astronaut.png",
        "astronaut_small.png": "astronaut.png",
        "chelsea.png": "chelsea.png",
        "coins.png": "coins.png",
        "rocket.png": "rocket.png",
        "rocket_q30.jpg": "rocket.png",
        "rocket_tiny.png": "rocket.png",
    }

    # The original goes, copies arrive: one of a labelled photo, one of a photo that an
    # earlier release wrote (no label: it is labelled with its own id as the copy joins it).
    (root / "astronaut.png").unlink()
    forget_group(settings, "chelsea.png")
    write(root, LATER)
    second = synced(settings, root, log)
    assert (second.deleted, second.done) == (1, len(LATER)), second
    after_delete = groups(settings)
    assert after_delete == {
        "astronaut_q70.jpg": "astronaut.png",
        "astronaut_small.png": "astronaut.png",
        "chelsea.png": "chelsea.png",
        "chelsea_small.png": "chelsea.png",
        "coins.png": "coins.png",
        "coins_q70.jpg": "coins.png",
        "rocket.png": "rocket.png",
        "rocket_q30.jpg": "rocket.png",
        "rocket_tiny.png": "rocket.png",
    }

    # The photo that names its group becomes another photo: it leaves, alone, and its copies
    # stay together under a name of their own (the smallest id among them).
    (root / "rocket.png").write_bytes(image_file(*CHANGED))
    assert synced(settings, root, log).done == 1
    changed = groups(settings)
    assert changed == after_delete | {
        "rocket.png": "rocket.png",
        "rocket_q30.jpg": "rocket_q30.jpg",
        "rocket_tiny.png": "rocket_q30.jpg",
    }

    # Metadata alone: payloads are rewritten, nothing embedded, and groups kept.
    write_manifest(
        root,
        [
            {"path": "rocket_tiny.png", "title": "A small rocket"},
            {"path": "coins_q70.jpg", "title": "Coins"},
        ],
    )
    retitled = synced(settings, root, log)
    assert (retitled.done, retitled.updated) == (0, 2), retitled
    assert groups(settings) == changed


def test_a_reindex_groups_the_copies_as_the_sync_did_searching_only_after_its_load(
    settings: Settings, tmp_path: Path
) -> None:
    """The load of a reindex groups each batch within itself, with no search of a collection
    that has no index yet; the grouping pass, once the index is built, gives the sync's groups.
    This process owns the store and runs the worker on its threads (one owner of Qdrant Edge),
    so the test reads the worker's counters."""
    root = tmp_path / "photos"
    write(root, FIRST | LATER)
    jobs = Jobs.from_settings(settings)
    # Batches of one photo: the load alone would group nothing.
    one_by_one = settings.model_copy(
        update={"indexer": settings.indexer.model_copy(update={"batch_size": 1})}
    )
    store = open_store(settings)
    try:
        sync = Runtime(settings, store=store)
        with worker_thread(create_app(settings), sync, queues=all_queues(settings)):
            job = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)))
        sync.close()
        assert (job.state, job.done) == ("done", len(FIRST) + len(LATER)), job
        synced = store.resolve(LIVE_ALIAS)
        # One batch in key order: each group named by its first photo.
        expected = {key: f"{name}.png" for key, (name, _) in (FIRST | LATER).items()}
        assert groups_in(store, synced) == expected

        reindex = Runtime(one_by_one, store=store)
        registry = reindex.metrics.registry

        def searches(by: str) -> float | None:
            return registry.get_sample_value(
                "photosearch_indexer_duplicate_searches_total", {"by": by}
            )

        before = {by: searches(by) for by in ("write", "pass")}
        app = create_app(one_by_one)
        with worker_thread(app, reindex, queues=all_queues(one_by_one)):
            job_id = submit_reindex(tasks(one_by_one), jobs, 1, str(root)).job_id
            job = wait_job(jobs, job_id)
            wait_idle(jobs)
        reindex.close()
        assert job.state == "done", (job, jobs.problems(job_id))
        rebuilt = store.resolve(LIVE_ALIAS)
        assert rebuilt != synced
        assert groups_in(store, rebuilt) == expected
        # Load (round 0), grouping pass (1), a catch-up with no change logged (2), the drain
        # at the switch (3): every copy was moved by the pass from the group of its own that
        # its batch gave it.
        copies = sum(1 for _, alteration in (FIRST | LATER).values() if alteration)
        assert (job.phase, job.round, job.regrouped, job.replayed) == (
            JobPhase.SWITCH,
            3,
            copies,
            0,
        )
        # No batch searched the stored photos (the load, and the catch-up wrote nothing);
        # the pass did.
        assert searches("write") == before["write"]
        after = searches("pass")
        assert after is not None and before["pass"] is not None and after > before["pass"]
    finally:
        store.close()


def embed_files(client: EmbeddingClient, files: list[bytes]) -> Embeddings:
    async def embed() -> Embeddings:
        async with EmbeddingClient(client.url, client.repository) as own:
            return await own.encode_image_bytes(files, model_version=1)

    return asyncio.run(embed())


def test_the_tests_copies_are_near_duplicates_and_their_photos_are_not(
    client: EmbeddingClient,
) -> None:
    """The premise of the test above, with the tests' model: every copy at or above the
    threshold from its photo, every pair of different photos below it."""
    files = FIRST | LATER | {"changed": CHANGED}
    vectors = embed_files(client, [image_file(*spec) for spec in files.values()])
    cosines = vectors @ vectors.T
    photos = [name for name, _ in files.values()]
    for i, (key, (name, alteration)) in enumerate(files.items()):
        original = list(files.values()).index((name, None))
        if alteration is not None:
            assert cosines[i, original] >= THRESHOLD, (key, cosines[i, original])
        others = [j for j, other in enumerate(photos) if other != name]
        assert float(np.max(cosines[i, others])) < THRESHOLD, key


def test_the_calibration_benchmark_prints_its_tables_and_a_choice(
    triton: TritonServer, repository: Path
) -> None:
    thresholds = ["0.90", "0.999"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests.bench_duplicates",
            "--repository",
            str(repository),
            "--triton-url",
            triton.url,
            "--photos",
            "3",
            "--thresholds",
            ",".join(thresholds),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "3 photos x (original + 9 copies) = 30 images, 435 pairs" in out
    # Three tables, a row per threshold each, every cell after the first a number.
    rows = [line for line in out.splitlines() if re.match(r"^\| 0\.\d+ \|", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| 0.90", "| 0.999"] * 3, rows
    for row in rows:
        for cell in row.strip("|").split("|")[1:]:
            for number in cell.split("/"):
                assert 0 <= float(number) <= 435, row
    chosen = re.search(r"^chosen threshold: (0\.\d+) \((.+)\)$", out, re.M)
    assert chosen is not None, out
    assert chosen[1] in thresholds
