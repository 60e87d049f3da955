"""Thin Celery tasks over the indexer's plain functions; retries are declared here."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from celery import Task
from celery.signals import worker_shutdown
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from indexer import reindex as reindexing
from indexer.app import app
from indexer.catalog import Photo
from indexer.jobs import JobKind, Jobs, JobState
from indexer.pipeline import embed_photos
from indexer.runtime import Runtime, close_runtime, get_runtime
from indexer.sync import Batch, IndexerError, run_sync
from photosearch.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from photosearch.settings import get_settings
from photosearch.vectorstore import StoreError, model_version_of

log = logging.getLogger(__name__)
settings = get_settings()

# Failures of a dependency, worth trying again later; a bad photo is not among them.
RETRYABLE = (
    TritonUnavailable,
    TritonTimeout,
    InferenceFailed,
    ModelVersionUnavailable,
    StoreError,
    ResponseHandlingException,
    UnexpectedResponse,
    RedisConnectionError,
    RedisTimeout,
    OSError,
)
# Job records carry the outcome of these; storing 1.5 million batch results would not help.
RETRY: dict[str, Any] = {
    "ignore_result": True,
    "autoretry_for": RETRYABLE,
    "max_retries": settings.indexer.max_retries,
    "retry_backoff": True,
    "retry_backoff_max": settings.indexer.retry_backoff_max_s,
    # Celery's jitter draws the wait anywhere in 0..backoff, so retries could be spent in
    # seconds and a short outage fail whole batches; the waits are spread by the failures'
    # own times, and a worker runs only `concurrency` tasks at once when the dependency returns.
    "retry_jitter": False,
}


def runtime() -> Runtime:
    return get_runtime(get_settings())


@worker_shutdown.connect
def _close(**_: object) -> None:
    close_runtime()


def send_batches(job_id: str, collection: str, source_uri: str, batches: list[Batch]) -> None:
    version = model_version_of(collection)
    for batch in batches:
        embed_batch.delay(
            job_id,
            batch.batch_id,
            collection,
            version,
            source_uri,
            [photo.to_wire() for photo in batch.photos],
        )


class JobTask(Task[Any, Any]):
    """A task whose final failure fails its job with the reason, so status never hangs."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs.get("job_id")
        if job_id:
            runtime().jobs.finish(job_id, JobState.FAILED, f"{type(exc).__name__}: {exc}")


class BatchTask(Task[Any, Any]):
    """A batch that failed for good (retries spent) counts its photos as failed."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id, batch_id, *_rest, photos = args
        rt = runtime()
        rt.metrics.photos.labels("failed").inc(len(photos))
        rt.jobs.note_problems(job_id, [f"batch {batch_id}: {type(exc).__name__}: {exc}"])
        if rt.jobs.complete_batch(job_id, batch_id, done=0, skipped=0, failed=len(photos)):
            batches_finished(job_id)


def batches_finished(job_id: str) -> None:
    """The job's last batch is counted: a sync is done, a reindex goes on to finalize."""
    rt = runtime()
    job = rt.jobs.get(job_id)
    # Already finished or finalizing: this is a batch delivered again after its job moved on.
    if job is None or job.state != JobState.RUNNING:
        return
    if job.kind == JobKind.REINDEX:
        finalize.delay(job_id)
        return
    state = JobState.FAILED if job.failed else JobState.DONE
    rt.jobs.finish(job_id, state, f"{job.failed} photos failed" if job.failed else "")
    optimize.delay(job.collection)


@app.task(name="indexer.sync", base=JobTask, **RETRY)
def sync(job_id: str, source_uri: str) -> None:
    """Diff a source against the live collection and send batches for what changed."""
    rt = runtime()
    batches = run_sync(rt, job_id, source_uri)
    job = rt.jobs.get(job_id)
    assert job is not None
    send_batches(job_id, job.collection, source_uri, batches)


@app.task(name="indexer.scheduled_sync", ignore_result=True)
def scheduled_sync() -> str | None:
    """Beat's nightly sync of the configured (or last used) source."""
    rt = runtime()
    source = rt.jobs.recall("source") or rt.settings.indexer.source
    if source is None:
        log.warning("nightly sync skipped: no source configured (PHOTOSEARCH_INDEXER__SOURCE)")
        return None
    return queue_sync(rt.jobs, source)


def queue_sync(jobs: Jobs, source: str) -> str:
    """Record a sync job and send it: beat's nightly one, the CLI's, the admin API's, `up`'s
    and the load test's all start this way. Returns the job id."""
    job_id = jobs.create(JobKind.SYNC, source=source)
    sync.delay(job_id, source)
    return job_id


@app.task(name="indexer.embed_batch", base=BatchTask, **RETRY)
def embed_batch(
    job_id: str,
    batch_id: str,
    collection: str,
    model_version: int,
    source_uri: str,
    photos: list[dict[str, Any]],
) -> dict[str, int]:
    """Read, decode, embed and upsert one batch; bad photos are recorded, not retried."""
    rt = runtime()
    with rt.metrics.batch_seconds.time():
        result = embed_photos(
            rt,
            collection=collection,
            model_version=model_version,
            source_uri=source_uri,
            photos=[Photo.from_wire(p) for p in photos],
        )
    rt.metrics.photos.labels("done").inc(len(result.done))
    rt.metrics.photos.labels("skipped").inc(len(result.skipped))
    rt.jobs.record_skipped(collection, result.skipped)
    rt.jobs.forget_skipped(collection, result.done)
    rt.jobs.note_problems(
        job_id, (f"{photo_id}: {reason}" for photo_id, (_, reason) in result.skipped.items())
    )
    if rt.jobs.complete_batch(
        job_id, batch_id, done=len(result.done), skipped=len(result.skipped), failed=0
    ):
        batches_finished(job_id)
    return {"done": len(result.done), "skipped": len(result.skipped)}


@app.task(name="indexer.reindex", base=JobTask, **RETRY)
def reindex(job_id: str, model_version: int, source_uri: str) -> None:
    """Build a new collection with another model version beside the live one."""
    rt = runtime()
    try:
        batches = reindexing.start_reindex(rt, job_id, model_version, source_uri)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    job = rt.jobs.get(job_id)
    assert job is not None
    if batches:
        send_batches(job_id, job.collection, source_uri, batches)
    else:
        finalize.delay(job_id)


@app.task(name="indexer.finalize", base=JobTask, **RETRY)
def finalize(job_id: str) -> None:
    """Catch up, verify, switch the live alias; then sync once more against the new one."""
    rt = runtime()
    try:
        batches = reindexing.finalize(rt, job_id)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    job = rt.jobs.get(job_id)
    assert job is not None
    if batches:
        send_batches(job_id, job.collection, job.source, batches)
    elif job.state == JobState.DONE:
        # Photos a sync wrote into the old collection while the switch happened.
        queue_sync(rt.jobs, job.source)


@app.task(name="indexer.optimize", **RETRY)
def optimize(collection: str) -> None:
    """Build the search index of a collection (the embedded engine does not in background)."""
    runtime().store.optimize(collection)


@app.task(name="indexer.rollback_job", base=JobTask, ignore_result=True)
def rollback_job(job_id: str) -> None:
    """Point searches back at the previous collection; the outcome goes into the job record."""
    rt = runtime()
    rt.jobs.start(job_id, state=JobState.RUNNING)
    try:
        message = reindexing.rollback(rt)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    rt.jobs.finish(job_id, JobState.DONE, message)


@app.task(name="indexer.drop")
def drop(collection: str) -> str:
    """Delete a collection that is not live."""
    return reindexing.drop(runtime(), collection)


@app.task(name="indexer.collections")
def collections() -> list[dict[str, Any]]:
    """The collections and their aliases, as the store owner sees them."""
    return [asdict(c) for c in reindexing.collections(runtime())]
