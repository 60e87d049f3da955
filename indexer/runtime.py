"""A worker process's resources: the vector store it owns, Triton, Redis, the reader threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from celery import Celery
from redis import Redis

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.budget import MB, MemoryBudget, return_freed_pixels
from core.embedding.client import EmbeddingClient
from core.embedding.errors import ModelVersionUnavailable
from core.embedding.manifest import ModelManifest, Priority, load_manifest
from core.feedback.popularity import Popularity
from core.jobs import Jobs
from core.settings import Settings
from core.sources import Source, open_source
from core.taskqueue import settings_of
from core.vectorstore import VectorStore, open_store
from indexer.metrics import worker_metrics
from indexer.photo.autotags import Taggers
from indexer.photo.skips import SkipRecords
from indexer.queue.capture import ChangeLog
from indexer.queue.listings import Listings
from indexer.queue.records import JobRecords
from indexer.queue.workqueue import WorkQueue

T = TypeVar("T")


class BlockingEmbedder:
    """The embedding client as a task thread calls it: each call waits for its answer on the
    client's event loop (`run`)."""

    def __init__(
        self, client: EmbeddingClient, run: Callable[[Coroutine[Any, Any, Embeddings]], Embeddings]
    ) -> None:
        self.client = client
        self.run = run

    def manifest(self, version: int) -> ModelManifest:
        return self.client.manifest(version)

    def embed_images(self, pixels: Pixels, *, model_version: int, chunk: int) -> Embeddings:
        return self.run(self.client.encode_images(pixels, model_version=model_version, chunk=chunk))


class Runtime:
    """Created on a worker's first task (never at import) and closed when the worker stops.

    The embedding client is async; a worker's task threads share one event loop running on
    its own thread, so the gRPC channel and Triton's dynamic batching are shared too.
    """

    def __init__(
        self,
        settings: Settings,
        store: VectorStore | None = None,
        sources: dict[str, Source] | None = None,
    ) -> None:
        self.settings = settings
        self.redis = Redis.from_url(settings.redis.url, socket_timeout=30)
        # The query cache (pre-warmed before a switch) may live in a Redis of its own.
        self.cache_redis = (
            Redis.from_url(settings.redis.cache, socket_timeout=30)
            if settings.redis.cache != settings.redis.url
            else self.redis
        )
        self.metrics = worker_metrics()
        self.jobs = Jobs(
            self.redis,
            settings.redis.prefix,
            settings.indexer.job_ttl_days,
            on_finish=self.metrics.job_finished,
        )
        self.work = WorkQueue(self.redis, settings.redis.prefix)
        self.skips = SkipRecords(self.redis, settings.redis.prefix)
        self.capture = ChangeLog(
            self.redis, settings.redis.prefix, settings.indexer.capture_shard_keys
        )
        self.readers = ThreadPoolExecutor(settings.indexer.read_threads, "photo-reader")
        # One budget for every decode of this process, whichever task's batch it reads.
        return_freed_pixels()
        self.decode_budget = MemoryBudget(
            settings.indexer.decode_memory_mb * MB, holder="the worker (decode_memory_mb)"
        )
        self._store = store
        self._own_store = store is None
        self._lock = threading.Lock()
        # A host may hand over sources by URI (a test counting what is listed).
        self._sources: dict[str, Source] = dict(sources or {})
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="triton-client", daemon=True
        )
        self._loop_thread.start()
        self.embedder = self.run(self._make_client())
        # The parts the plain functions take (indexer/plan/planner.py, pipeline.py).
        self.records = JobRecords(
            self.jobs,
            self.skips,
            self.capture,
            self.work,
            Listings(self.redis, settings.redis.prefix),
            Popularity(self.redis, settings.redis.prefix),
        )
        self.images = BlockingEmbedder(self.embedder, self.run)
        # Each model version's vocabulary embedded once in this process, and kept on disk.
        self.taggers = Taggers(
            settings.indexer,
            manifest=self.current_manifest,
            embed=self.embed_texts,
            cache_dir=settings.data_dir / "tags",
        )

    async def _make_client(self) -> EmbeddingClient:
        # The gRPC aio channel belongs to the loop it was created on. Indexing waits behind
        # searches in Triton's queues.
        return EmbeddingClient.from_settings(
            self.settings, executor=self.readers, priority=Priority.INDEXING
        )

    def current_manifest(self, version: int) -> ModelManifest:
        """Version N's manifest read again (the client keeps the first it read): a tag rule
        that `photosearch model calibrate-tags` writes meanwhile counts from the next job step,
        without a restart."""
        try:
            return load_manifest(self.settings.repository, version)
        except FileNotFoundError as exc:
            raise ModelVersionUnavailable(str(exc)) from None

    def embed_texts(self, texts: list[str], version: int) -> Embeddings:
        """Texts embedded at a model version by Triton, from a task thread."""
        return self.run(self.embedder.encode_texts(texts, model_version=version, timeout_s=120))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the client loop from a task thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def store(self) -> VectorStore:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.settings)
            return self._store

    def duplicate_threshold(self, model_version: int) -> float:
        """The near-duplicate threshold of a model version's embeddings: its calibration's
        (`photosearch model calibrate`), else PHOTOSEARCH_INDEXER__DUPLICATE_THRESHOLD."""
        try:
            calibration = self.images.manifest(model_version).calibration
        except ModelVersionUnavailable:
            # Grouping reads stored vectors, not the model: a pass over a version whose
            # export is gone (or was never this repository's) groups by the setting.
            calibration = None
        if calibration is not None and calibration.duplicate_threshold is not None:
            return calibration.duplicate_threshold
        return self.settings.indexer.duplicate_threshold

    def source(self, uri: str) -> Source:
        with self._lock:
            if uri not in self._sources:
                self._sources[uri] = open_source(uri, self.settings)
            return self._sources[uri]

    def close(self) -> None:
        self.run(self.embedder.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=self.settings.lifecycle.stop_s)
        if not self._loop.is_running():
            self._loop.close()
        self.readers.shutdown(wait=False, cancel_futures=True)
        for source in self._sources.values():
            source.close()
        if self._own_store and self._store is not None:
            self._store.close()
        self.redis.close()
        if self.cache_redis is not self.redis:
            self.cache_redis.close()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime(settings: Settings) -> Runtime:
    """The process's runtime, created on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(settings)
        return _runtime


def runtime_of(app: Celery) -> Runtime:
    """The worker process's runtime, made from the settings of a task's app."""
    return get_runtime(settings_of(app))


def install_runtime(runtime: Runtime | None) -> Runtime | None:
    """Set the process's runtime (a host process that owns the store); returns the old one."""
    global _runtime
    with _runtime_lock:
        previous, _runtime = _runtime, runtime
        return previous


def close_runtime() -> None:
    """Close the runtime this process created (worker shutdown)."""
    previous = install_runtime(None)
    if previous is not None:
        previous.close()
