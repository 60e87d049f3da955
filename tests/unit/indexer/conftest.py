"""The parts a plan and a batch take, real but for Triton's image encoder: a folder of a few
tiny photos, Qdrant Edge in-process, the job's records in the session's Redis under a prefix
of the test's own, and an image embedder that stands in for Triton (which cannot run in a
unit test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import pytest
from redis import Redis

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.images import ImageLimits
from core.embedding.manifest import ModelManifest
from core.jobs import Jobs
from core.jobstatus import JobKind, JobState, JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import VectorStore, collection_name
from indexer.photo.pipeline import BatchResult, embed_photos
from indexer.photo.skips import SkipRecords
from indexer.photo.writer import ShardPhoto
from indexer.queue.capture import ChangeLog
from indexer.queue.listings import Listings
from indexer.queue.records import JobRecords
from indexer.queue.workqueue import WorkQueue
from tests.support.indexing import photo_folder
from tests.support.models import stand_in_manifest
from tests.support.stores import engine_store

DIM = 8
COLLECTION = collection_name(1, "unit")
PHOTOS = 6
INDEXED_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class MeanColours:
    """Triton's image encoder stood in for: a photo's vector is the mean colour of its left
    and right halves and its contrast, so the same picture embeds the same and different ones
    (a mirrored one too) apart. `calls` records the batches sent: (images, chunk)."""

    def __init__(self, target: Literal["cpu", "gpu"] = "cpu") -> None:
        self.target = target
        self.calls: list[tuple[int, int]] = []  # (images, chunk)

    def manifest(self, version: int) -> ModelManifest:
        return stand_in_manifest(version, DIM, target=self.target)

    def embed_images(self, pixels: Pixels, *, model_version: int, chunk: int) -> Embeddings:
        self.calls.append((len(pixels), chunk))
        batch = pixels.astype(np.float32) / 255  # [N, 16, 16, 3]
        left, right = batch[:, :, :8].mean(axis=(1, 2)), batch[:, :, 8:].mean(axis=(1, 2))
        vectors = np.column_stack(
            [left, right, batch.std(axis=(1, 2, 3)), np.full(len(batch), 0.1)]
        )
        vectors -= 0.3  # around a grey photo, so that colours tell photos apart
        unit: Embeddings = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(
            np.float32
        )
        return unit


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A source folder of PHOTOS tiny photos in two sub-folders and several formats."""
    root = tmp_path / "photos"
    photo_folder(root, PHOTOS)
    return root


@pytest.fixture
def source(folder: Path) -> LocalSource:
    return LocalSource(folder)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[VectorStore]:
    edge = engine_store("edge", tmp_path, (COLLECTION,), DIM)
    edge.ensure_indexes(COLLECTION)
    try:
        yield edge
    finally:
        edge.close()


@pytest.fixture
def records(redis: Redis) -> JobRecords:
    """The job's records under a prefix of this test's own."""
    prefix = f"unit-{uuid.uuid4().hex}"
    return JobRecords(
        Jobs(redis, prefix),
        SkipRecords(redis, prefix),
        ChangeLog(redis, prefix),
        WorkQueue(redis, prefix),
        Listings(redis, prefix),
    )


@pytest.fixture
def readers() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="photo-reader") as pool:
        yield pool


@pytest.fixture
def settings() -> IndexerSettings:
    return IndexerSettings(batch_size=4, shard_size=10)


class EmbedBatch(Protocol):
    def __call__(
        self, photos: Sequence[ShardPhoto], collection: str = ..., model_version: int = ...
    ) -> BatchResult: ...


@pytest.fixture
def embed_batch(source: LocalSource, store: VectorStore, readers: ThreadPoolExecutor) -> EmbedBatch:
    """Photos of the folder embedded with the stand-in encoder and written, as an embed task
    does (into COLLECTION at model version 1 unless told)."""

    def run(
        photos: Sequence[ShardPhoto], collection: str = COLLECTION, model_version: int = 1
    ) -> BatchResult:
        return embed_photos(
            photos,
            collection=collection,
            model_version=model_version,
            source=source,
            store=store,
            embedder=MeanColours(),
            readers=readers,
            limits=ImageLimits(),
            cpu_chunk=4,
            duplicate_threshold=0.9999,
        )

    return run


@pytest.fixture
def job(records: JobRecords, source: LocalSource) -> JobStatus:
    """A running sync of the folder into COLLECTION."""
    job_id = records.jobs.create(JobKind.SYNC, source=source.uri)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    found = records.jobs.get(job_id)
    assert found is not None
    return found
