"""What a task's failure does: a dependency's failure is retried with backoff, then pauses a
job through the outage (indexer/jobs/pause.py); any other fails its job, or counts its
batch's photos as failed, with the reason, so a job's status never hangs."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from celery import Task
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from core.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from core.jobstatus import JobKind, JobState
from core.taskqueue import INCREMENT, SYNC
from core.vectorstore import StoreError
from indexer.jobs import pause as pausing
from indexer.rounds import after
from indexer.runtime import runtime_of

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
    # The store's disk, a socket, a source that did not answer (SourceUnavailable): a photo
    # that cannot be read is not among them, the reader records it (indexer/photo/reader.py).
    OSError,
)
# Job records carry the outcome of these; storing 1.5 million batch results would not help.
# max_retries and retry_backoff_max come from the app's settings (indexer/app.py).
RETRY: dict[str, Any] = {
    "ignore_result": True,
    "autoretry_for": RETRYABLE,
    "retry_backoff": True,
    # Celery's jitter draws the wait anywhere in 0..backoff, so retries could be spent in
    # seconds and a short outage fail whole batches; the waits are spread by the failures'
    # own times, and a worker runs only `concurrency` tasks at once when the dependency returns.
    "retry_jitter": False,
}


class JobTask(Task[Any, Any]):
    """A task whose final failure fails its job with the reason, so status never hangs; a
    job pauses through a dependency's outage instead (indexer/jobs/pause.py)."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs.get("job_id")
        if not job_id:
            return
        rt = runtime_of(self.app)
        first_step = self.name in (SYNC, INCREMENT)  # started again once the outage ends
        if isinstance(exc, RETRYABLE) and pausing.pause(
            rt.jobs, job_id, exc, first_step=first_step
        ):
            with suppress(*pausing.REDIS_DOWN):  # the sweep gives it back then
                rt.work.requeue(job_id, task_id)  # a plan token's shard
            return
        job = rt.jobs.get(job_id)
        rt.jobs.finish(job_id, JobState.FAILED, f"{type(exc).__name__}: {exc}")
        if job is None or job.kind != JobKind.REINDEX:  # a reindex keeps its work to resume
            rt.work.drop(job_id, rt.jobs.ttl_s)


class BatchTask(Task[Any, Any]):
    """A batch that failed for good (retries spent) counts its photos as failed, unless its
    job pauses for the outage: then the batch goes back to be embedded once it is over."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs["job_id"]
        rt = runtime_of(self.app)
        if isinstance(exc, RETRYABLE) and pausing.pause(rt.jobs, job_id, exc):
            with suppress(*pausing.REDIS_DOWN):
                rt.work.requeue(job_id, task_id)
            return
        claimed = rt.work.claim_batch(job_id, task_id)
        if claimed is None:
            return
        failed = len(claimed.body.photos) if claimed.body else 0
        rt.metrics.photos.labels("failed").inc(failed)
        rt.jobs.note_problems(job_id, [f"batch {claimed.id}: {type(exc).__name__}: {exc}"])
        after(
            self.app, rt, job_id, rt.work.complete(job_id, task_id, claimed.id, {"failed": failed})
        )
