"""The sync: bring the live collection level with its source, shard by shard (a full sync), or
with the changes its feed reported (an increment). Planning and embedding are the rounds'
(indexer/queue/workqueue.py, planner.py); this starts and ends them, with the budget of deletions
the job may make (indexer/plan/deleteguard.py) and a last round for the shards it held back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from redis import Redis
from redis.lock import Lock

from core.embedding.manifest import ModelManifest, list_versions
from core.jobs import Jobs
from core.jobstatus import FINISHED, JobKind, JobState
from core.settings_indexer import IndexerSettings
from core.sources import Source
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore, collection_name
from core.vectorstore.base import model_version_of
from indexer.leases import LeasedLock
from indexer.plan.deleteguard import open_budget
from indexer.plan.planner import held_units, label_unlabelled
from indexer.plan.shards import ShardMap, load_map
from indexer.queue.messages import FeedUnit, ReplayUnit, ShardUnit, Unit
from indexer.queue.records import JobRecords
from indexer.queue.workqueue import WorkQueue


class IndexerError(Exception):
    """An indexer operation was refused; the message says why and what to do."""


def alias_lock(redis: Redis, prefix: str, *, lease_s: float = 10.0) -> Lock:
    """Serializes every change of the aliases: the first collection, switch, rollback, drop.
    Held for the change itself, never while a source is listed; leased, so a worker killed
    holding it lets it go within `lease_s` (indexer/leases.py)."""
    return LeasedLock(redis, f"{prefix}:lock:aliases", lease_s=lease_s)


def live_collection(
    job_id: str,
    *,
    store: VectorStore,
    lock: Lock,
    model_version: int | None,
    repository: Path,
    manifest: Callable[[int], ModelManifest],
) -> str:
    """The collection searches read; the first sync creates it with `model_version` (None:
    the newest of the repository), as wide as its `manifest` says."""
    with lock:
        try:
            return store.resolve(LIVE_ALIAS)
        except CollectionNotFound:
            pass
        version = model_version or max(list_versions(repository))
        name = collection_name(version, job_id)
        store.create_collection(name, manifest(version).embedding_dim)
        store.set_aliases({LIVE_ALIAS: name})
        return name


def start_round(work: WorkQueue, job_id: str, round_: int, shards: ShardMap) -> None:
    work.start_round(job_id, round_, (ShardUnit(shard) for shard in shards.ranges()))


def running(jobs: Jobs, job_id: str, source_uri: str, collection: str) -> None:
    jobs.start(
        job_id,
        state=JobState.RUNNING,
        source=source_uri,
        collection=collection,
        model_version=model_version_of(collection),
    )


def unlabelled(store: VectorStore, collection: str) -> bool:
    """Whether the collection holds points of a release before shards (no label yet)."""
    return next(iter(store.points(collection, unlabelled=True)), None) is not None


def start_sync(
    job_id: str,
    source_uri: str,
    collection: str,
    *,
    source: Source,
    store: VectorStore,
    records: JobRecords,
    max_delete_share: float,
) -> None:
    """List every shard of the source (`source_uri`) against the live `collection`."""
    jobs = records.jobs
    running(jobs, job_id, source_uri, collection)
    open_budget(jobs, job_id, store.count(collection), max_delete_share)
    store.ensure_indexes(collection)
    migrated = label_unlabelled(store, collection, source)
    if migrated:
        jobs.note_problems(job_id, [f"{migrated} points of an earlier release got a shard"])
    start_round(records.work, job_id, 0, load_map(store, collection))


def start_increment(
    job_id: str,
    source_uri: str,
    *,
    store: VectorStore,
    records: JobRecords,
    settings: IndexerSettings,
) -> None:
    """Plan what the change feed reported since the last increment."""
    if not settings.feed:
        raise IndexerError("no change feed: set PHOTOSEARCH_INDEXER__FEED, or run a full sync")
    try:
        collection = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        raise IndexerError("nothing is indexed yet: run a full sync first") from None
    if unlabelled(store, collection):
        raise IndexerError("the live collection has points of an earlier release: sync once")
    running(records.jobs, job_id, source_uri, collection)
    open_budget(records.jobs, job_id, store.count(collection), settings.max_delete_share)
    units: list[Unit] = [FeedUnit(0)]
    # Photos whose popularity changed (photosearch feedback popularity): planned as keys.
    pending = popular_keys(store, collection, records)
    for n, start in enumerate(range(0, len(pending), settings.feed_chunk)):
        keys = tuple(pending[start : start + settings.feed_chunk])
        units.append(ReplayUnit(f"popularity:{n}", keys))
    records.work.start_round(job_id, 0, units)


def popular_keys(store: VectorStore, collection: str, records: JobRecords) -> list[str]:
    """The keys of the photos whose popularity changed since the last increment, taken."""
    if records.popularity is None:
        return []
    ids = records.popularity.take_pending()
    return sorted({p.key for p in store.points_by_id(collection, ids) if p.key})


def nightly_kind(store: VectorStore, feed: str | None) -> JobKind:
    """The increment when a `feed` is set and the live collection can take one, else a sync."""
    if not feed:
        return JobKind.SYNC
    try:
        collection = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        return JobKind.SYNC
    return JobKind.SYNC if unlabelled(store, collection) else JobKind.INCREMENT


def finish_sync(job_id: str, *, jobs: Jobs, work: WorkQueue, max_delete_share: float) -> str | None:
    """The round is over: the shards it held back are planned again in a round of their own,
    their deletions within the budget now that the whole listing has been seen; or the job
    ends (failed if any photo failed for good). Returns the collection when it ended, whose
    search index is then rebuilt where the engine does not do it itself."""
    job = jobs.get(job_id)
    if job is None or job.state in FINISHED:
        return None
    held = held_units(work.planned(job_id).values())
    if held:
        jobs.update(
            job_id,
            message=f"{len(held)} shards losing more than max_delete_share="
            f"{max_delete_share:g} of their photos were held back until "
            f"the whole listing was seen: {job.held} deletions, within the budget of "
            f"{job.delete_budget}",
        )
        work.start_round(job_id, job.round + 1, held)
        return None
    state = JobState.FAILED if job.failed else JobState.DONE
    jobs.finish(job_id, state, f"{job.failed} photos failed" if job.failed else "")
    if job.kind == JobKind.SYNC and job.source:
        # Every shard was listed and the delete guard let each through: this is the source
        # the collection now mirrors, the one the nightly job and old points' reads follow.
        # Remembered only here: a sync refused (a wrong folder, the guard) leaves it as it was.
        # Photos that failed one by one do not make the source wrong.
        jobs.remember("source", job.source)
    work.drop(job_id, jobs.ttl_s)
    return job.collection
