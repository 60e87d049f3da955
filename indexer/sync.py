"""The sync: bring the live collection level with its source, shard by shard (a full sync), or
with the changes its feed reported (an increment). Planning and embedding are the rounds'
(indexer/workqueue.py, planner.py); this starts and ends them, with the budget of deletions
the job may make (indexer/deleteguard.py) and a last round for the shards it held back."""

from __future__ import annotations

from redis.lock import Lock

from core.embedding.manifest import list_versions
from core.jobs import FINISHED, JobKind, JobState
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, collection_name
from core.vectorstore.base import model_version_of
from indexer.deleteguard import open_budget
from indexer.planner import held_units, label_unlabelled, shard_unit
from indexer.runtime import Runtime
from indexer.shards import ShardMap, load_map


class IndexerError(Exception):
    """An indexer operation was refused; the message says why and what to do."""


def alias_lock(rt: Runtime) -> Lock:
    """Serializes every change of the aliases: the first collection, switch, rollback, drop.
    Held for the change itself, never while a source is listed."""
    lock: Lock = rt.redis.lock(f"{rt.settings.redis.prefix}:lock:aliases", timeout=600)
    return lock


def live_collection(rt: Runtime, job_id: str) -> str:
    """The collection searches read; the first sync creates it with the configured version."""
    with alias_lock(rt):
        try:
            return rt.store.resolve(LIVE_ALIAS)
        except CollectionNotFound:
            pass
        version = rt.settings.indexer.model_version or max(list_versions(rt.settings.repository))
        name = collection_name(version, job_id)
        rt.store.create_collection(name, rt.embedder.manifest(version).embedding_dim)
        rt.store.set_aliases({LIVE_ALIAS: name})
        return name


def start_round(rt: Runtime, job_id: str, round_: int, shards: ShardMap) -> None:
    rt.work.start_round(job_id, round_, (shard_unit(shard) for shard in shards.ranges()))


def running(rt: Runtime, job_id: str, source_uri: str, collection: str) -> None:
    rt.jobs.start(
        job_id,
        state=JobState.RUNNING,
        source=source_uri,
        collection=collection,
        model_version=model_version_of(collection),
    )


def unlabelled(rt: Runtime, collection: str) -> bool:
    """Whether the collection holds points of a release before shards (no label yet)."""
    return next(iter(rt.store.points(collection, unlabelled=True)), None) is not None


def start_sync(rt: Runtime, job_id: str, source_uri: str) -> None:
    """List every shard of the source against the live collection."""
    collection = live_collection(rt, job_id)
    running(rt, job_id, source_uri, collection)
    open_budget(rt.jobs, job_id, rt.store.count(collection), rt.settings.indexer.max_delete_share)
    rt.jobs.remember("source", source_uri)
    rt.store.ensure_indexes(collection)
    migrated = label_unlabelled(rt.store, collection, rt.source(source_uri))
    if migrated:
        rt.jobs.note_problems(job_id, [f"{migrated} points of an earlier release got a shard"])
    start_round(rt, job_id, 0, load_map(rt.store, collection))


def start_increment(rt: Runtime, job_id: str, source_uri: str) -> None:
    """Plan what the change feed reported since the last increment."""
    if not rt.settings.indexer.feed:
        raise IndexerError("no change feed: set PHOTOSEARCH_INDEXER__FEED, or run a full sync")
    try:
        collection = rt.store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        raise IndexerError("nothing is indexed yet: run a full sync first") from None
    if unlabelled(rt, collection):
        raise IndexerError("the live collection has points of an earlier release: sync once")
    running(rt, job_id, source_uri, collection)
    open_budget(rt.jobs, job_id, rt.store.count(collection), rt.settings.indexer.max_delete_share)
    rt.work.start_round(job_id, 0, [("feed:0", {"kind": "feed", "seq": 0})])


def nightly_kind(rt: Runtime) -> JobKind:
    """The increment when a feed is set and the live collection can take one, else a sync."""
    if not rt.settings.indexer.feed:
        return JobKind.SYNC
    try:
        collection = rt.store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        return JobKind.SYNC
    return JobKind.SYNC if unlabelled(rt, collection) else JobKind.INCREMENT


def finish_sync(rt: Runtime, job_id: str) -> str | None:
    """The round is over: the shards it held back are planned again in a round of their own,
    their deletions within the budget now that the whole listing has been seen; or the job
    ends (failed if any photo failed for good). Returns the collection when it ended, whose
    search index is then rebuilt where the engine does not do it itself."""
    job = rt.jobs.get(job_id)
    if job is None or job.state in FINISHED:
        return None
    held = held_units(rt.work.planned(job_id).values())
    if held:
        rt.jobs.update(
            job_id,
            message=f"{len(held)} shards losing more than max_delete_share="
            f"{rt.settings.indexer.max_delete_share:g} of their photos were held back until "
            f"the whole listing was seen: {job.held} deletions, within the budget of "
            f"{job.delete_budget}",
        )
        rt.work.start_round(job_id, job.round + 1, held)
        return None
    state = JobState.FAILED if job.failed else JobState.DONE
    rt.jobs.finish(job_id, state, f"{job.failed} photos failed" if job.failed else "")
    rt.work.drop(job_id, rt.jobs.ttl_s)
    return job.collection
