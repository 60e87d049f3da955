"""Thin Celery tasks over the indexer's plain functions.

A job's tasks: `sync` / `increment` / `reindex` open its first round; `plan` and `embed_batch`
are tokens that pull one shard or one batch each (indexer/queue/workqueue.py) and hand out the
next tokens (indexer/rounds.py); the task that ends a round sends `finalize`, which ends the
job or opens the next round. What a failure does, and the retries every job task declares,
are in indexer/failures.py.
"""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from dataclasses import asdict
from typing import Any

from celery import Celery, Task, shared_task
from celery.signals import worker_shutdown

from core.collectionroles import collection_roles
from core.embedding.images import ImageLimits
from core.feedback.popularity import refresh
from core.jobstatus import FINISHED, JobKind, JobState
from core.sources import SourceError, check_source
from core.submit import start_queued, submit_sync
from core.taskqueue import FINALIZE, OPTIMIZE, REINDEX
from core.vectorstore import LIVE_ALIAS, model_version_of
from indexer.failures import RETRY, BatchTask, JobTask
from indexer.jobs import reindex as reindexing
from indexer.jobs import rollback as rollingback
from indexer.jobs import sync as syncing
from indexer.jobs import units
from indexer.jobs.sync import IndexerError
from indexer.leases import LeasedLock
from indexer.photo.autotags import note_off
from indexer.photo.pipeline import embed_photos
from indexer.plan.deleteguard import DeletesRefused, refuse
from indexer.rounds import after, pump
from indexer.runtime import Runtime, close_runtime, runtime_of

log = logging.getLogger(__name__)


@worker_shutdown.connect
def _close(**_: object) -> None:
    close_runtime()


@shared_task(name="indexer.plan", bind=True, base=JobTask, **RETRY)
def plan(self: Task[Any, Any], job_id: str) -> None:
    """Plan one unit of the job: a shard, a chunk of its feed, or a shard to group."""
    rt = runtime_of(self.app)
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
    ended = units.commit(rt, job_id, token, unit.id, planned)
    planned.after_commit()
    after(self.app, rt, job_id, ended)


@shared_task(name="indexer.embed_batch", bind=True, base=BatchTask, **RETRY)
def embed_batch(self: Task[Any, Any], job_id: str) -> None:
    """Read, decode, embed and upsert one batch of the job; bad photos are recorded."""
    rt = runtime_of(self.app)
    token = str(self.request.id)
    claimed = rt.work.claim_batch(job_id, token)
    if claimed is None:
        after(self.app, rt, job_id, rt.work.release(job_id, token))
        return
    job = rt.jobs.get(job_id)
    if claimed.body is None or job is None:  # counted before this delivery
        after(self.app, rt, job_id, rt.work.complete(job_id, token, claimed.id, {}))
        return
    with rt.metrics.batch_seconds.time():
        result = embed_photos(
            claimed.body.photos,
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
    rt = runtime_of(self.app)
    # One step at a time per job; another worker's nudge that finds it taken leaves it.
    # Leased: a worker killed inside it lets the step go within the lease (indexer/leases.py).
    key = f"{rt.settings.redis.prefix}:job:{job_id}:finalize"
    lock = LeasedLock(rt.redis, key, lease_s=rt.settings.indexer.lease_s)
    if not lock.acquire(blocking=False):
        return
    try:
        job = rt.jobs.get(job_id)
        if job is None or job.state in FINISHED:
            return
        if job.kind == JobKind.ROLLBACK:
            rollingback.advance_rollback(
                job_id,
                store=rt.store,
                records=rt.records,
                lock=syncing.alias_lock(
                    rt.redis, rt.settings.redis.prefix, lease_s=rt.settings.indexer.lease_s
                ),
                settings=rt.settings.indexer,
            )
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
    if job.state not in FINISHED and pump(self.app, rt.work, rt.settings.indexer, job_id):
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
    rt = runtime_of(self.app)
    source = accepted_source(rt, job_id, source_uri)
    if source is None:
        return
    settings = rt.settings
    collection = syncing.live_collection(
        job_id,
        store=rt.store,
        lock=syncing.alias_lock(rt.redis, settings.redis.prefix, lease_s=settings.indexer.lease_s),
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
    pump(self.app, rt.work, rt.settings.indexer, job_id)


@shared_task(name="indexer.increment", bind=True, base=JobTask, **RETRY)
def increment(self: Task[Any, Any], job_id: str, source_uri: str) -> None:
    """Plan what the change feed reported since the last increment."""
    rt = runtime_of(self.app)
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
    pump(self.app, rt.work, rt.settings.indexer, job_id)


@shared_task(name="indexer.reindex", bind=True, base=JobTask, **RETRY)
def reindex(self: Task[Any, Any], job_id: str, model_version: int, source_uri: str) -> None:
    """Build a new collection with another model version beside the live one."""
    rt = runtime_of(self.app)
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
    pump(self.app, rt.work, rt.settings.indexer, job_id)


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
    rt = runtime_of(self.app)
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
    return scheduled(self.app, runtime_of(self.app), JobKind.SYNC, "weekly full sync", wait=True)


@shared_task(name="indexer.scheduled_popularity", bind=True, ignore_result=True)
def scheduled_popularity(self: Task[Any, Any]) -> int:
    """Beat's daily count of each photo's popularity from the feedback events (kept for the
    feedback retention); the photos whose value changed, which the nightly job writes."""
    rt = runtime_of(self.app)
    now, retention_s = time.time(), rt.settings.api.feedback_retention_days * 86400
    done = refresh(rt.redis, rt.settings.redis.prefix, since=0.0, now=now, retention_s=retention_s)
    log.info("popularity: %d photos, %d changed", done.photos, len(done.changed))
    return len(done.changed)


@shared_task(name="indexer.optimize", bind=True, **RETRY)
def optimize(self: Task[Any, Any], collection: str) -> None:
    """Build the search index of a collection (the embedded engine does not in background)."""
    runtime_of(self.app).store.optimize(collection)


@shared_task(name="indexer.rollback_job", bind=True, base=JobTask, **RETRY)
def rollback_job(self: Task[Any, Any], job_id: str) -> None:
    """Replay the changes since the switch into the previous collection, then point searches
    back at it; the outcome goes into the job record."""
    rt = runtime_of(self.app)
    rt.jobs.start(job_id, state=JobState.RUNNING)
    try:
        rollingback.start_rollback(
            job_id, store=rt.store, records=rt.records, settings=rt.settings.indexer
        )
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
    rt = runtime_of(self.app)
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
    rt = runtime_of(self.app)
    lock = syncing.alias_lock(
        rt.redis, rt.settings.redis.prefix, lease_s=rt.settings.indexer.lease_s
    )
    return reindexing.drop(collection, store=rt.store, records=rt.records, lock=lock)


@shared_task(name="indexer.collections", bind=True)
def collections(self: Task[Any, Any]) -> list[dict[str, Any]]:
    """The collections, their aliases and roles, as the store owner sees them."""
    rt = runtime_of(self.app)
    return [asdict(c) for c in collection_roles(rt.store.collections(), rt.jobs.get)]


@shared_task(name="indexer.evaluate", bind=True)
def evaluate(self: Task[Any, Any], request: dict[str, Any]) -> dict[str, Any]:
    """Judgement sets evaluated on the store this worker owns (`photosearch eval`)."""
    from core.quality.request import answer

    rt = runtime_of(self.app)
    return answer(
        request,
        store=rt.store,
        embed=units.query_embeddings(rt),
        calibration=lambda version: rt.embedder.manifest(version).calibration,
    )
