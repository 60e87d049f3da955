"""Thin Celery tasks over the indexer's plain functions; retries are declared here.

A job's tasks: `sync` / `increment` / `reindex` open its first round; `plan` and `embed_batch`
are tokens that pull one shard or one batch each (indexer/queue/workqueue.py) and hand out the next
tokens (`pump`); the task that ends a round sends `finalize`, which ends the job or opens the
next round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict
from typing import Any

from celery import Celery, Task, shared_task
from celery.signals import worker_shutdown
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from core.collectionroles import collection_roles
from core.deployment import Presence
from core.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from core.embedding.images import ImageLimits
from core.feedback.popularity import refresh
from core.jobstatus import FINISHED, JobKind, JobPhase, JobState
from core.sources import SourceError, check_source
from core.submit import start_queued, submit_sync
from core.taskqueue import EMBED_BATCH, FINALIZE, OPTIMIZE, PLAN, REINDEX, settings_of
from core.vectorstore import LIVE_ALIAS, StoreError, model_version_of
from indexer.jobs import pause as pausing
from indexer.jobs import reindex as reindexing
from indexer.jobs import rollback as rollingback
from indexer.jobs import sync as syncing
from indexer.jobs import units
from indexer.jobs.sync import IndexerError
from indexer.photo.autotags import note_off
from indexer.photo.pipeline import embed_photos
from indexer.plan.catalog import Photo
from indexer.plan.deleteguard import DeletesRefused, refuse
from indexer.runtime import Runtime, close_runtime, get_runtime

log = logging.getLogger(__name__)

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
# Shards are planned while fewer batches than this many times the broker's room wait in Redis.
PLAN_AHEAD = 4


def runtime(task: Task[Any, Any]) -> Runtime:
    """The worker process's runtime, made from the settings of the task's app."""
    return get_runtime(settings_of(task.app))


def triton_ready(rt: Runtime) -> Callable[[int], bool]:
    """Whether Triton serves a model version, asked from a task thread."""
    return lambda version: rt.run(rt.embedder.is_ready(version), timeout=30)


@worker_shutdown.connect
def _close(**_: object) -> None:
    close_runtime()


# --- the tokens of a job's rounds --------------------------------------------------------------


def pump(app: Celery, rt: Runtime, job_id: str) -> bool:
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
        app.tasks[PLAN].apply_async((job_id,), task_id=token)
    for token in tokens.embed:
        app.tasks[EMBED_BATCH].apply_async((job_id,), task_id=token)
    return tokens.round_ended


def after(app: Celery, rt: Runtime, job_id: str, round_ended: bool) -> None:
    if pump(app, rt, job_id) or round_ended:
        app.tasks[FINALIZE].delay(job_id)


def nudge(app: Celery, rt: Runtime, recent: int = 100) -> None:
    """Move every unfinished job on, whatever was lost: tokens its room allows (the sweep gives
    back the room and work of lost ones), `finalize` where a round has ended or a job waits
    (a reindex for its index or the live lock, a rollback for the live lock), and a paused
    job once its dependencies answer."""
    pausing.record_unrecorded(rt.jobs)
    start_queued(app, rt.jobs)  # a job in line for the live lock, its holder ended unannounced
    for job in rt.jobs.recent(recent):
        if job.state in (*FINISHED, JobState.QUEUED):
            continue
        if job.state == JobState.PAUSED and not pausing.go_on(
            job, jobs=rt.jobs, ready=triton_ready(rt), store=rt.store
        ):
            continue
        if job.kind == JobKind.REINDEX and job.phase == JobPhase.NONE:  # paused before it started
            app.tasks[REINDEX].delay(job.id, job.model_version, job.source)
            continue
        ended = pump(app, rt, job.id)
        waiting = (
            job.kind == JobKind.REINDEX and job.phase in (JobPhase.INDEXING, JobPhase.CATCH_UP)
        ) or (job.kind == JobKind.ROLLBACK and job.phase != JobPhase.REPLAY)
        if ended or waiting or rt.work.round_done(job.id, job.round):
            app.tasks[FINALIZE].delay(job.id)


def nudging(app: Celery, stop: threading.Event) -> threading.Thread:
    """A worker's thread that nudges the jobs every min(30 s, visibility timeout) until stop.

    Every worker passes here as it starts: it marks the Redis as PhotoSearch's (before this
    returns, so a command run once the worker has started finds the mark) and says, round
    after round, that the worker runs (core/deployment.py).
    """
    settings = settings_of(app)
    interval = min(30.0, float(settings.indexer.visibility_timeout_s))
    presence = Presence(settings.redis.url, settings.redis.prefix, ttl_s=3 * interval)
    presence.renew()

    def run() -> None:
        while not stop.wait(interval):
            presence.renew()
            try:
                nudge(app, get_runtime(settings))
            except Exception:  # Redis down, say: the next round of nudges tries again
                log.exception("nudging the index jobs failed")
        presence.close()

    thread = threading.Thread(target=run, name="nudge-jobs", daemon=True)
    thread.start()
    return thread


class JobTask(Task[Any, Any]):
    """A task whose final failure fails its job with the reason, so status never hangs; a
    long job pauses through a dependency's outage instead (indexer/jobs/pause.py)."""

    def on_failure(
        self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: object
    ) -> None:
        job_id = args[0] if args else kwargs.get("job_id")
        if not job_id:
            return
        rt = runtime(self)
        if isinstance(exc, RETRYABLE) and pausing.pause(rt.jobs, job_id, exc):
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
        rt = runtime(self)
        if isinstance(exc, RETRYABLE) and pausing.pause(rt.jobs, job_id, exc):
            with suppress(*pausing.REDIS_DOWN):
                rt.work.requeue(job_id, task_id)
            return
        claimed = rt.work.claim_batch(job_id, task_id)
        if claimed is None:
            return
        failed = len(claimed.body["photos"]) if claimed.body else 0
        rt.metrics.photos.labels("failed").inc(failed)
        rt.jobs.note_problems(job_id, [f"batch {claimed.id}: {type(exc).__name__}: {exc}"])
        after(
            self.app, rt, job_id, rt.work.complete(job_id, task_id, claimed.id, {"failed": failed})
        )


@shared_task(name="indexer.plan", bind=True, base=JobTask, **RETRY)
def plan(self: Task[Any, Any], job_id: str) -> None:
    """Plan one unit of the job: a shard, a chunk of its feed, or a shard to group."""
    rt = runtime(self)
    token = str(self.request.id)
    unit = rt.work.claim_unit(job_id, token)
    job = rt.jobs.get(job_id)
    if unit is None or job is None:
        after(self.app, rt, job_id, rt.work.release(job_id, token))
        return
    worker = str(self.request.hostname or "")
    try:
        planned = units.plan_unit(rt, job, unit, worker)
    except DeletesRefused as exc:
        # The job ends here: no unit is planned, and nothing deleted, after this one.
        refuse(rt.jobs, rt.work, job_id, str(exc))
        rt.work.release(job_id, token)
        return
    ended = units.commit(rt, job_id, token, units.unit_id_of(unit), planned)
    planned.after_commit()
    after(self.app, rt, job_id, ended)


@shared_task(name="indexer.embed_batch", bind=True, base=BatchTask, **RETRY)
def embed_batch(self: Task[Any, Any], job_id: str) -> None:
    """Read, decode, embed and upsert one batch of the job; bad photos are recorded."""
    rt = runtime(self)
    token = str(self.request.id)
    claimed = rt.work.claim_batch(job_id, token)
    if claimed is None:
        after(self.app, rt, job_id, rt.work.release(job_id, token))
        return
    job = rt.jobs.get(job_id)
    if claimed.body is None or job is None:  # counted before this delivery
        after(self.app, rt, job_id, rt.work.complete(job_id, token, claimed.id, {}))
        return
    photos = [
        (Photo.from_wire({k: v for k, v in p.items() if k != "shard"}), str(p["shard"]))
        for p in claimed.body["photos"]
    ]
    with rt.metrics.batch_seconds.time():
        result = embed_photos(
            photos,
            collection=job.collection,
            model_version=job.model_version,
            source=rt.source(job.source),
            store=rt.store,
            embedder=rt.images,
            readers=rt.readers,
            limits=ImageLimits.of_stored(rt.settings.images),
            reserve=rt.decode_budget.reserve,
            cpu_chunk=rt.settings.indexer.cpu_chunk,
            duplicate_threshold=rt.duplicate_threshold(job.model_version),
            group_with_stored=not reindexing.loading(job),
            on_grouped=rt.metrics.duplicate_searches.labels("write").inc,
            tagger=rt.taggers(job.model_version),
        )
    rt.metrics.photos.labels("done").inc(len(result.done))
    rt.metrics.photos.labels("skipped").inc(len(result.skipped))
    rt.skips.record(job.collection, result.skipped)
    rt.skips.forget(job.collection, [*result.done, *result.gone])
    rt.jobs.note_problems(job_id, (f"{key}: {why}" for key, (_, why) in result.skipped.items()))
    counts = {"done": len(result.done), "skipped": len(result.skipped), "deleted": len(result.gone)}
    after(self.app, rt, job_id, rt.work.complete(job_id, token, claimed.id, counts))


@shared_task(name="indexer.finalize", bind=True, base=JobTask, **RETRY)
def finalize(self: Task[Any, Any], job_id: str) -> None:
    """A round of the job ended (or a reindex waits): end the job, or take its next step. Safe
    to run any number of times: nudges send it again whenever a job seems stalled."""
    rt = runtime(self)
    # One step at a time per job; another worker's nudge that finds it taken leaves it.
    lock = rt.redis.lock(f"{rt.settings.redis.prefix}:job:{job_id}:finalize", timeout=900)
    if not lock.acquire(blocking=False):
        return
    try:
        job = rt.jobs.get(job_id)
        if job is None or job.state in FINISHED:
            return
        if job.kind == JobKind.ROLLBACK:
            rollingback.advance_rollback(job_id, **units.reindex_parts(rt))
        elif job.kind != JobKind.REINDEX:
            if rt.work.round_done(job_id, job.round):
                # Ends the job, or opens the round of the shards held back.
                collection = syncing.finish_sync(
                    job_id,
                    jobs=rt.jobs,
                    work=rt.work,
                    max_delete_share=rt.settings.indexer.max_delete_share,
                )
                if collection is not None:
                    self.app.tasks[OPTIMIZE].delay(collection)
        else:
            units.advance(rt, job_id)
        job = rt.jobs.get(job_id)
        assert job is not None
        if job.kind == JobKind.REINDEX and job.state == JobState.DONE and rt.settings.indexer.feed:
            # The changes the feed kept while the reindex held the live collection.
            submit_sync(self.app, rt.jobs, job.source, JobKind.INCREMENT)
    finally:
        lock.release()
    if job.state in FINISHED:
        start_queued(self.app, rt.jobs)  # the job in line behind this one, if any
    if job.state not in FINISHED and pump(self.app, rt, job_id):
        self.app.tasks[FINALIZE].delay(
            job_id
        )  # a round that ends as it starts (every shard split away)


def accepted_source(rt: Runtime, job_id: str, source_uri: str) -> str | None:
    """The job's source in its one spelling; one refused (malformed, a host, outside the allowed
    roots) fails the job with the reason before anything is listed, written or deleted."""
    try:
        return check_source(source_uri, rt.settings)
    except SourceError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, f"refused: {exc}")
        return None


@shared_task(name="indexer.sync", bind=True, base=JobTask, **RETRY)
def sync(self: Task[Any, Any], job_id: str, source_uri: str) -> None:
    """List the source shard by shard against the live collection."""
    rt = runtime(self)
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    settings = rt.settings
    collection = syncing.live_collection(
        job_id,
        store=rt.store,
        lock=syncing.alias_lock(rt.redis, settings.redis.prefix),
        model_version=settings.indexer.model_version,
        repository=settings.repository,
        manifest=rt.embedder.manifest,
    )
    syncing.start_sync(
        job_id,
        source,
        collection,
        source=rt.source(source),
        store=rt.store,
        records=rt.records,
        max_delete_share=settings.indexer.max_delete_share,
    )
    note_off(rt.jobs, job_id, rt.taggers, model_version_of(collection))
    pump(self.app, rt, job_id)


@shared_task(name="indexer.increment", bind=True, base=JobTask, **RETRY)
def increment(self: Task[Any, Any], job_id: str, source_uri: str) -> None:
    """Plan what the change feed reported since the last increment."""
    rt = runtime(self)
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    try:
        syncing.start_increment(
            job_id, source, store=rt.store, records=rt.records, settings=rt.settings.indexer
        )
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    note_off(rt.jobs, job_id, rt.taggers, model_version_of(rt.store.resolve(LIVE_ALIAS)))
    pump(self.app, rt, job_id)


@shared_task(name="indexer.reindex", bind=True, base=JobTask, **RETRY)
def reindex(self: Task[Any, Any], job_id: str, model_version: int, source_uri: str) -> None:
    """Build a new collection with another model version beside the live one."""
    rt = runtime(self)
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    try:
        reindexing.start_reindex(
            job_id,
            model_version,
            source,
            ready=lambda version: rt.run(rt.embedder.is_ready(version)),
            manifest=rt.embedder.manifest,
            store=rt.store,
            records=rt.records,
            qdrant=rt.settings.qdrant,
        )
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    note_off(rt.jobs, job_id, rt.taggers, model_version)
    pump(self.app, rt, job_id)


def scheduled(
    app: Celery, rt: Runtime, kind: JobKind, what: str, *, wait: bool = False
) -> str | None:
    """A job beat asks for, on the source last synced; refused or without a source: logged.
    wait: behind a job of another kind changing the live collection, it queues instead."""
    source = rt.jobs.recall("source") or rt.settings.indexer.source
    if source is None:
        log.warning("%s skipped: no source configured (PHOTOSEARCH_INDEXER__SOURCE)", what)
        return None
    with suppress(SourceError):  # refused: the job's task records why
        source = check_source(source, rt.settings)
    submitted = submit_sync(app, rt.jobs, source, kind, wait=wait)
    if submitted.refused:
        log.warning("%s skipped: %s", what, submitted.refused)
    elif submitted.queued:
        log.info("%s queued: it starts once the live collection is free", what)
    return submitted.job_id


@shared_task(name="indexer.scheduled_sync", bind=True, ignore_result=True)
def scheduled_sync(self: Task[Any, Any]) -> str | None:
    """Beat's nightly job: the increment when a feed is set, else a full sync."""
    rt = runtime(self)
    return scheduled(
        self.app,
        rt,
        syncing.nightly_kind(rt.store, rt.settings.indexer.feed),
        "nightly job (a feed keeps its changes)",
    )


@shared_task(name="indexer.scheduled_reconcile", bind=True, ignore_result=True)
def scheduled_reconcile(self: Task[Any, Any]) -> str | None:
    """Beat's weekly full sync beside a feed: what the feed missed is found by listing. It
    waits for a nightly increment still running rather than skip a week."""
    return scheduled(self.app, runtime(self), JobKind.SYNC, "weekly full sync", wait=True)


@shared_task(name="indexer.scheduled_popularity", bind=True, ignore_result=True)
def scheduled_popularity(self: Task[Any, Any]) -> int:
    """Beat's daily count of each photo's popularity from the feedback events (kept for the
    feedback retention); the photos whose value changed, which the nightly job writes."""
    rt = runtime(self)
    now, retention_s = time.time(), rt.settings.api.feedback_retention_days * 86400
    done = refresh(rt.redis, rt.settings.redis.prefix, since=0.0, now=now, retention_s=retention_s)
    log.info("popularity: %d photos, %d changed", done.photos, len(done.changed))
    return len(done.changed)


@shared_task(name="indexer.optimize", bind=True, **RETRY)
def optimize(self: Task[Any, Any], collection: str) -> None:
    """Build the search index of a collection (the embedded engine does not in background)."""
    runtime(self).store.optimize(collection)


@shared_task(name="indexer.rollback_job", bind=True, base=JobTask, **RETRY)
def rollback_job(self: Task[Any, Any], job_id: str) -> None:
    """Replay the changes since the switch into the previous collection, then point searches
    back at it; the outcome goes into the job record."""
    rt = runtime(self)
    rt.jobs.start(job_id, state=JobState.RUNNING)
    try:
        rollingback.start_rollback(job_id, **units.reindex_parts(rt))
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    after(self.app, rt, job_id, False)


def running_tasks(app: Celery, timeout_s: float = 1.0) -> set[str]:
    """Ids of the tasks live workers run now (a job's tokens among them); workers that do not
    answer within timeout_s count as gone."""
    replies = app.control.inspect(timeout=timeout_s).active() or {}
    return {str(task["id"]) for tasks in replies.values() for task in tasks}


@shared_task(name="indexer.resume", bind=True, base=JobTask, **RETRY)
def resume(self: Task[Any, Any], job_id: str) -> None:
    """Set a failed, cancelled or orphaned reindex going again from its checkpoints."""
    rt = runtime(self)
    # Workers that came back may already run the job's tokens: their claims stay theirs, and
    # so do those of tasks that begin while the workers are asked.
    asked = time.time()
    running = running_tasks(self.app)
    try:
        started = reindexing.resume(job_id, records=rt.records, running=running, before=asked)
    except IndexerError as exc:
        rt.jobs.update(job_id, message=f"resume refused: {exc}")
        return
    if not started:  # it never began its load: its start again
        job = rt.jobs.get(job_id)
        assert job is not None
        self.app.tasks[REINDEX].delay(job_id, job.model_version, job.source)
        return
    after(self.app, rt, job_id, rt.work.round_done(job_id, rt.jobs.get(job_id).round))  # type: ignore[union-attr]


@shared_task(name="indexer.drop", bind=True)
def drop(self: Task[Any, Any], collection: str) -> str:
    """Delete a collection that is not live."""
    rt = runtime(self)
    lock = syncing.alias_lock(rt.redis, rt.settings.redis.prefix)
    return reindexing.drop(collection, store=rt.store, records=rt.records, lock=lock)


@shared_task(name="indexer.collections", bind=True)
def collections(self: Task[Any, Any]) -> list[dict[str, Any]]:
    """The collections, their aliases and roles, as the store owner sees them."""
    rt = runtime(self)
    return [asdict(c) for c in collection_roles(rt.store.collections(), rt.jobs.get)]


@shared_task(name="indexer.evaluate", bind=True)
def evaluate(self: Task[Any, Any], request: dict[str, Any]) -> dict[str, Any]:
    """Judgement sets evaluated on the store this worker owns (`photosearch eval`)."""
    from core.quality.request import answer

    rt = runtime(self)
    return answer(
        request,
        store=rt.store,
        embed=units.query_embeddings(rt),
        calibration=lambda version: rt.embedder.manifest(version).calibration,
    )
