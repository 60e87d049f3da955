"""Thin Celery tasks over the indexer's plain functions; retries are declared here.

A job's tasks: `sync` / `increment` / `reindex` open its first round; `plan` and `embed_batch`
are tokens that pull one shard or one batch each (indexer/workqueue.py) and hand out the next
tokens (`pump`); the task that ends a round sends `finalize`, which ends the job or opens the
next round.
"""

from __future__ import annotations

import logging
import threading
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any

from celery import Task
from celery.signals import worker_shutdown
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from core.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from core.jobs import FINISHED, LIVE_LOCK, REINDEX_LOCK, JobKind, Jobs, JobState
from core.settings import get_settings
from core.sources import SourceError, check_source
from core.vectorstore import StoreError
from indexer import increment as incrementing
from indexer import planner
from indexer import reindex as reindexing
from indexer import sync as syncing
from indexer.app import app
from indexer.catalog import Photo
from indexer.deleteguard import DeletesRefused, refuse
from indexer.pipeline import embed_photos
from indexer.runtime import Runtime, close_runtime, get_runtime
from indexer.shards import ShardRange
from indexer.sync import IndexerError

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
# Shards are planned while fewer batches than this many times the broker's room wait in Redis.
PLAN_AHEAD = 4


def runtime() -> Runtime:
    return get_runtime(get_settings())


@worker_shutdown.connect
def _close(**_: object) -> None:
    close_runtime()


# --- starting jobs: the CLI, the admin API, beat and `up` -------------------------------------


@dataclass(frozen=True)
class Submitted:
    """The job that answers a request: a new one, a running one it joined, or none (refused)."""

    job_id: str
    joined: bool = False
    refused: str = ""  # why nothing started


def submit_sync(
    jobs: Jobs, source: str, kind: JobKind = JobKind.SYNC, *, force: bool = False
) -> Submitted:
    """Start a sync or an increment of the live collection, unless a job already changes it:
    the same kind over the same source (and force) is joined, anything else refuses this one.
    force: it may delete more than max_delete_share of the live index."""
    job_id = jobs.create(kind, source=source, force=int(force))
    holder = jobs.claim_lock(LIVE_LOCK, job_id)
    if holder is None:
        (sync if kind == JobKind.SYNC else increment).delay(job_id, source)
        return Submitted(job_id)
    jobs.delete(job_id)
    running = jobs.get(holder)
    asked = (kind, source, force)
    if running is not None and (running.kind, running.source, running.force) == asked:
        return Submitted(holder, joined=True)
    what = f"{running.kind} job {holder}" if running else f"job {holder}"
    return Submitted(
        holder, refused=f"{what} is changing the live collection; try again once it has finished"
    )


def queue_sync(jobs: Jobs, source: str, *, force: bool = False) -> str:
    """A full sync (or the running one it joins): `up`, the load tests and tests start this way."""
    submitted = submit_sync(jobs, source, force=force)
    if submitted.refused:
        raise IndexerError(submitted.refused)
    return submitted.job_id


def submit_reindex(
    jobs: Jobs, model_version: int, source: str, *, force: bool = False
) -> Submitted:
    """Start a reindex, unless one runs: the same version over the same source is joined.
    force: it may switch to a collection of fewer than (1 - max_delete_share) x the live one's
    photos."""
    job_id = jobs.create(
        JobKind.REINDEX, source=source, model_version=model_version, force=int(force)
    )
    holder = jobs.claim_lock(REINDEX_LOCK, job_id)
    if holder is None:
        reindex.delay(job_id, model_version, source)
        return Submitted(job_id)
    jobs.delete(job_id)
    running = jobs.get(holder)
    asked = (model_version, source, force)
    if running is not None and (running.model_version, running.source, running.force) == asked:
        return Submitted(holder, joined=True)
    version = running.model_version if running else "?"
    return Submitted(
        holder, refused=f"reindex job {holder} (model version {version}) is running; wait for it"
    )


# --- the tokens of a job's rounds --------------------------------------------------------------


def pump(rt: Runtime, job_id: str) -> bool:
    """Publish the tokens the job has room for: embedding up to max_queued_batches, planning
    while the batches waiting are few. True when the round turned out to have ended."""
    s = rt.settings.indexer
    tokens = rt.work.reserve(
        job_id,
        max_embed=s.max_queued_batches,
        max_plan=s.planners,
        plan_ahead=PLAN_AHEAD * s.max_queued_batches,
        ttl_s=s.visibility_timeout_s,
    )
    for token in tokens.plan:
        plan.apply_async((job_id,), task_id=token)
    for token in tokens.embed:
        embed_batch.apply_async((job_id,), task_id=token)
    return tokens.round_ended


def after(rt: Runtime, job_id: str, round_ended: bool) -> None:
    if pump(rt, job_id) or round_ended:
        finalize.delay(job_id)


def nudge(rt: Runtime, recent: int = 100) -> None:
    """Move every unfinished job on, whatever was lost: tokens its room allows (the sweep gives
    back the room and work of lost ones), and `finalize` where a round has ended or a reindex
    waits (for its index, or for a sync to finish)."""
    for job in rt.jobs.recent(recent):
        if job.state in (*FINISHED, JobState.QUEUED) or job.kind == JobKind.ROLLBACK:
            continue
        ended = pump(rt, job.id)
        waiting = job.kind == JobKind.REINDEX and job.phase == "indexing"
        if ended or waiting or rt.work.round_done(job.id, job.round):
            finalize.delay(job.id)


def nudging(stop: threading.Event) -> threading.Thread:
    """A worker's thread that nudges the jobs every min(30 s, visibility timeout) until stop."""

    def run() -> None:
        interval = min(30.0, float(settings.indexer.visibility_timeout_s))
        while not stop.wait(interval):
            try:
                nudge(runtime())
            except Exception:  # Redis down, say: the next round of nudges tries again
                log.exception("nudging the index jobs failed")

    thread = threading.Thread(target=run, name="nudge-jobs", daemon=True)
    thread.start()
    return thread


class JobTask(Task[Any, Any]):
    """A task whose final failure fails its job with the reason, so status never hangs."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs.get("job_id")
        if job_id:
            rt = runtime()
            rt.jobs.finish(job_id, JobState.FAILED, f"{type(exc).__name__}: {exc}")
            rt.work.drop(job_id, rt.jobs.ttl_s)


class BatchTask(Task[Any, Any]):
    """A batch that failed for good (retries spent) counts its photos as failed."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs["job_id"]
        rt = runtime()
        claimed = rt.work.claim_batch(job_id, task_id)
        if claimed is None:
            return
        failed = len(claimed.body["photos"]) if claimed.body else 0
        rt.metrics.photos.labels("failed").inc(failed)
        rt.jobs.note_problems(job_id, [f"batch {claimed.id}: {type(exc).__name__}: {exc}"])
        after(rt, job_id, rt.work.complete(job_id, task_id, claimed.id, {"failed": failed}))


@app.task(name="indexer.plan", base=JobTask, bind=True, **RETRY)
def plan(self: Task[Any, Any], job_id: str) -> None:
    """Plan one shard of the job (or one chunk of its feed)."""
    rt = runtime()
    token = str(self.request.id)
    unit = rt.work.claim_unit(job_id, token)
    job = rt.jobs.get(job_id)
    if unit is None or job is None:
        after(rt, job_id, rt.work.release(job_id, token))
        return
    worker = str(self.request.hostname or "")
    try:
        if unit["kind"] == "feed":
            unit_id = f"feed:{unit['seq']}"
            planned = incrementing.plan_feed(rt, job, int(unit["seq"]), worker)
        else:
            shard = ShardRange.from_wire(unit)
            unit_id = shard.id
            planned = planner.plan_shard(rt, job, shard, worker, bool(unit.get("confirm")))
    except DeletesRefused as exc:
        # The job ends here: no unit is planned, and nothing deleted, after this one.
        refuse(rt, job_id, str(exc))
        rt.work.release(job_id, token)
        return
    ended = rt.work.commit(
        job_id,
        token,
        unit_id,
        planned.record,
        batches=planned.batches,
        units=planned.units,
        counts=planned.counts,
        marks=planned.marks,
    )
    planned.after_commit()
    after(rt, job_id, ended)


@app.task(name="indexer.embed_batch", base=BatchTask, bind=True, **RETRY)
def embed_batch(self: Task[Any, Any], job_id: str) -> None:
    """Read, decode, embed and upsert one batch of the job; bad photos are recorded."""
    rt = runtime()
    token = str(self.request.id)
    claimed = rt.work.claim_batch(job_id, token)
    if claimed is None:
        after(rt, job_id, rt.work.release(job_id, token))
        return
    job = rt.jobs.get(job_id)
    if claimed.body is None or job is None:  # counted before this delivery
        after(rt, job_id, rt.work.complete(job_id, token, claimed.id, {}))
        return
    photos = [
        (Photo.from_wire({k: v for k, v in p.items() if k != "shard"}), str(p["shard"]))
        for p in claimed.body["photos"]
    ]
    with rt.metrics.batch_seconds.time():
        result = embed_photos(
            rt,
            collection=job.collection,
            model_version=job.model_version,
            source_uri=job.source,
            photos=photos,
        )
    rt.metrics.photos.labels("done").inc(len(result.done))
    rt.metrics.photos.labels("skipped").inc(len(result.skipped))
    rt.skips.record(job.collection, result.skipped)
    rt.skips.forget(job.collection, result.done)
    rt.jobs.note_problems(job_id, (f"{key}: {why}" for key, (_, why) in result.skipped.items()))
    counts = {"done": len(result.done), "skipped": len(result.skipped)}
    after(rt, job_id, rt.work.complete(job_id, token, claimed.id, counts))


@app.task(name="indexer.finalize", base=JobTask, **RETRY)
def finalize(job_id: str) -> None:
    """A round of the job ended (or a reindex waits): end the job, or take its next step. Safe
    to run any number of times: nudges send it again whenever a job seems stalled."""
    rt = runtime()
    # One step at a time per job; another worker's nudge that finds it taken leaves it.
    lock = rt.redis.lock(f"{rt.settings.redis.prefix}:job:{job_id}:finalize", timeout=900)
    if not lock.acquire(blocking=False):
        return
    try:
        job = rt.jobs.get(job_id)
        if job is None or job.state in FINISHED:
            return
        if job.kind != JobKind.REINDEX:
            if rt.work.round_done(job_id, job.round):
                # Ends the job, or opens the round of the shards held back.
                collection = syncing.finish_sync(rt, job_id)
                if collection is not None:
                    optimize.delay(collection)
        else:
            reindexing.advance(rt, job_id)
        job = rt.jobs.get(job_id)
        assert job is not None
        if job.kind == JobKind.REINDEX and job.state == JobState.DONE and rt.settings.indexer.feed:
            # The changes the feed kept while the reindex held the live collection.
            submit_sync(rt.jobs, job.source, JobKind.INCREMENT)
    finally:
        lock.release()
    if job.state not in FINISHED and pump(rt, job_id):
        finalize.delay(job_id)  # a round that ends as it starts (every shard split away)


def accepted_source(rt: Runtime, job_id: str, source_uri: str) -> str | None:
    """The job's source in its one spelling; one refused (malformed, a host, outside the allowed
    roots) fails the job with the reason before anything is listed, written or deleted."""
    try:
        return check_source(source_uri, rt.settings)
    except SourceError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, f"refused: {exc}")
        return None


@app.task(name="indexer.sync", base=JobTask, **RETRY)
def sync(job_id: str, source_uri: str) -> None:
    """List the source shard by shard against the live collection."""
    rt = runtime()
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    syncing.start_sync(rt, job_id, source)
    pump(rt, job_id)


@app.task(name="indexer.increment", base=JobTask, **RETRY)
def increment(job_id: str, source_uri: str) -> None:
    """Plan what the change feed reported since the last increment."""
    rt = runtime()
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    try:
        syncing.start_increment(rt, job_id, source)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    pump(rt, job_id)


@app.task(name="indexer.reindex", base=JobTask, **RETRY)
def reindex(job_id: str, model_version: int, source_uri: str) -> None:
    """Build a new collection with another model version beside the live one."""
    rt = runtime()
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    try:
        reindexing.start_reindex(rt, job_id, model_version, source)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    pump(rt, job_id)


def scheduled(rt: Runtime, kind: JobKind, what: str) -> str | None:
    """A job beat asks for, on the source last synced; refused or without a source: logged."""
    source = rt.jobs.recall("source") or rt.settings.indexer.source
    if source is None:
        log.warning("%s skipped: no source configured (PHOTOSEARCH_INDEXER__SOURCE)", what)
        return None
    with suppress(SourceError):  # refused: the job's task records why
        source = check_source(source, rt.settings)
    submitted = submit_sync(rt.jobs, source, kind)
    if submitted.refused:
        log.warning("%s skipped: %s", what, submitted.refused)
    return submitted.job_id


@app.task(name="indexer.scheduled_sync", ignore_result=True)
def scheduled_sync() -> str | None:
    """Beat's nightly job: the increment when a feed is set, else a full sync."""
    rt = runtime()
    return scheduled(rt, syncing.nightly_kind(rt), "nightly job (a feed keeps its changes)")


@app.task(name="indexer.scheduled_reconcile", ignore_result=True)
def scheduled_reconcile() -> str | None:
    """Beat's weekly full sync beside a feed: what the feed missed is found by listing."""
    return scheduled(runtime(), JobKind.SYNC, "weekly full sync")


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
