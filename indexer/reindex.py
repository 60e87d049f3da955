"""A full reindex beside the live collection, verified before an atomic switch; rollback.

Its phases: the load (round 0: every shard of the source into a new collection, whose search
index a Qdrant server defers; each batch grouped within itself), the index build, the grouping
pass (round 1: near-duplicate groups over the whole collection with the index,
indexer/regroup.py), then catch-up rounds that plan every shard again while the reindex holds
the live collection (so no increment writes to the old one only). A round that changes
nothing is the verification: each shard's listing equals its points, and the collection's
count per shard (a facet) equals what the round expected. Then
the popular queries are embedded with the new model and the aliases switch, the alias lock
held for that alone, unless the new collection holds fewer than (1 - max_delete_share) x the
live one's photos and the reindex is not forced (indexer/deleteguard.py).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from core.embedding.arrays import Embeddings
from core.jobs import FINISHED, LIVE_LOCK, JobKind, JobState, JobStatus
from core.querycache import prewarm
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    CollectionInfo,
    CollectionNotFound,
    collection_name,
    model_version_of,
)
from indexer.deleteguard import refuse, switch_refusal
from indexer.regroup import group_units
from indexer.runtime import Runtime
from indexer.shards import ShardMap, load_map
from indexer.sync import IndexerError, alias_lock, start_round

# Round 0 is the load; the grouping pass is round 1, the catch-up passes follow.
GROUPING_ROUND = 1


def loading(job: JobStatus) -> bool:
    """A reindex's load: its collection has no search index to find near-duplicates with
    yet, so each batch is grouped within itself, and the grouping pass does the rest."""
    return job.kind == JobKind.REINDEX and job.phase == "load"


def start_reindex(rt: Runtime, job_id: str, model_version: int, source_uri: str) -> None:
    """Create the new collection and open the load round over the live collection's shards."""
    if not rt.run(rt.embedder.is_ready(model_version)):
        raise IndexerError(
            f"model version {model_version} is not loaded in Triton: export it, then run "
            "`photosearch triton load` (or restart Triton) before reindexing"
        )
    dim = rt.embedder.manifest(model_version).embedding_dim
    collection = collection_name(model_version, job_id)
    rt.store.create_collection(collection, dim, bulk=True)
    rt.jobs.start(
        job_id,
        state=JobState.RUNNING,
        phase="load",
        source=source_uri,
        collection=collection,
        model_version=model_version,
    )
    try:
        shards = load_map(rt.store, rt.store.resolve(LIVE_ALIAS))
    except CollectionNotFound:
        shards = ShardMap()  # one shard of everything, split as it is listed
    start_round(rt, job_id, 0, shards)


def advance(rt: Runtime, job_id: str) -> None:
    """The next step of a reindex whose round ended, or which waits; nothing while its round
    runs. Run again and again (the workers' nudges), it does each step once."""
    job = rt.jobs.get(job_id)
    if job is None or job.state in FINISHED:
        return
    ended = rt.work.round_done(job_id, job.round)
    if job.phase == "load":
        if not ended:
            return
        rt.store.finish_bulk_load(job.collection)
        rt.jobs.update(job_id, phase="indexing", state=JobState.FINALIZING)
        job.phase = "indexing"
    if job.phase == "indexing":
        # Waits end at a later nudge.
        if not rt.store.index_ready(job.collection):
            rt.jobs.update(job_id, message="building the search index of the new collection")
            return
        # The round first: a step that dies between the two is taken again, the round's
        # start being once only.
        shards = load_map(rt.store, job.collection)
        rt.work.start_round(job_id, GROUPING_ROUND, group_units(shards))
        rt.jobs.update(job_id, phase="grouping", message="grouping near-duplicates, shard by shard")
        return
    if job.phase == "grouping":
        if not rt.work.round_done(job_id, GROUPING_ROUND):
            return
        holder = rt.jobs.claim_lock(LIVE_LOCK, job_id)
        if holder is not None:
            rt.jobs.update(job_id, message=f"waiting for job {holder} on the live collection")
            return
        start_round(rt, job_id, GROUPING_ROUND + 1, load_map(rt.store, job.collection))
        rt.jobs.update(job_id, phase="catch-up", message="")
        return
    if not ended:
        return
    passes = job.round - GROUPING_ROUND
    if job.changes == 0:
        switch(rt, job_id)
    elif passes >= rt.settings.indexer.catch_up_rounds:
        rt.jobs.finish(
            job_id,
            JobState.FAILED,
            f"the source still changed in catch-up pass {passes} ({job.changes} photos); "
            "run the reindex again at a quieter time",
        )
    else:
        start_round(rt, job_id, job.round + 1, load_map(rt.store, job.collection))


def verify(rt: Runtime, job_id: str, collection: str) -> None:
    """The collection's count per shard is what the round that changed nothing expected, no
    point lies outside a shard, and sample searches answer. Reads one record per shard."""
    expected: dict[str, int] = defaultdict(int)
    for record in rt.work.planned(job_id).values():
        if "points" in record:
            expected[record["label"]] += record["points"]
    actual = rt.store.shard_sizes(collection)
    wrong = sorted(s for s in expected.keys() | actual.keys() if expected[s] != actual.get(s, 0))
    if wrong:
        shown = "; ".join(f"{s!r}: {actual.get(s, 0)} of {expected[s]}" for s in wrong[:5])
        raise IndexerError(
            f"{collection} does not match the source in {len(wrong)} shards: {shown}"
        )
    if rt.store.count(collection) != sum(expected.values()):
        raise IndexerError(f"{collection} holds points outside every shard")
    labels = [s for s, n in actual.items() if n]
    for label in random.sample(labels, min(rt.settings.indexer.verify_samples, len(labels))):
        first = next(iter(rt.store.points(collection, shard=label)))
        [stored] = rt.store.retrieve(collection, [first.photo_id], with_vectors=True)
        assert stored.vector is not None
        hits = rt.store.search(collection, stored.vector, limit=1)
        # A duplicate photo may rank first instead: the score, not the id, shows it answered.
        if not hits or hits[0].score < 0.99:
            raise IndexerError(f"a sample search for {first.photo_id} in {collection} failed")


def switch(rt: Runtime, job_id: str) -> None:
    """Verify, check what the switch would drop, warm the cache, move the aliases; the job
    ends (its locks released)."""
    job = rt.jobs.get(job_id)
    assert job is not None
    collection = job.collection
    try:
        verify(rt, job_id, collection)
    except IndexerError as exc:
        rt.jobs.finish(job_id, JobState.FAILED, str(exc))
        return
    refusal = switch_refusal(rt, job)
    if refusal is not None:
        refuse(rt, job_id, refusal)
        return
    warmed = warm_cache(rt, job_id, model_version_of(collection))
    with alias_lock(rt):
        aliases = rt.store.aliases()
        if aliases.get(LIVE_ALIAS) == collection:  # a run of this step that died after it
            previous = aliases.get(PREVIOUS_ALIAS)
        else:
            previous = aliases.get(LIVE_ALIAS)
            rt.store.set_aliases({LIVE_ALIAS: collection, PREVIOUS_ALIAS: previous})
    rt.jobs.finish(
        job_id,
        JobState.DONE,
        f"{LIVE_ALIAS} switched from {previous or 'nothing'} to {collection}; "
        f"{warmed} popular queries pre-warmed",
    )
    rt.work.drop(job_id, rt.jobs.ttl_s)


def warm_cache(rt: Runtime, job_id: str, model_version: int) -> int:
    """Embed the popular recent queries with the new version, so the switch is no miss storm.

    A failure here costs latency after the switch, not correctness: it is noted, not fatal.
    """
    api = rt.settings.api

    def embed(texts: Sequence[str]) -> Embeddings:
        return rt.run(rt.embedder.encode_texts(texts, model_version=model_version, timeout_s=120))

    try:
        return prewarm(
            rt.cache_redis,
            rt.settings.redis.prefix,
            model_version,
            embed,
            days=api.popular_days,
            n=api.prewarm_queries,
            ttl_s=api.cache_ttl_s,
        )
    except Exception as exc:  # Redis or Triton: the switch goes on with a cold cache
        rt.jobs.note_problems(job_id, [f"cache pre-warm skipped: {type(exc).__name__}: {exc}"])
        return 0


def rollback(rt: Runtime) -> str:
    """Swap the live and previous collections: searches go back to the model before."""
    with alias_lock(rt):
        aliases = rt.store.aliases()
        previous, live = aliases.get(PREVIOUS_ALIAS), aliases.get(LIVE_ALIAS)
        if previous is None:
            raise IndexerError("nothing to roll back to: there is no previous collection")
        rt.store.set_aliases({LIVE_ALIAS: previous, PREVIOUS_ALIAS: live})
    return (
        f"{LIVE_ALIAS} -> {previous} (model version {model_version_of(previous)}); "
        f"{PREVIOUS_ALIAS} -> {live}"
    )


def drop(rt: Runtime, collection: str) -> str:
    """Delete a collection for good; never the live one."""
    with alias_lock(rt):
        aliases = rt.store.aliases()
        if aliases.get(LIVE_ALIAS) == collection:
            raise IndexerError(f"{collection} is live; switch or roll back first")
        if not rt.store.has_collection(collection):
            raise IndexerError(f"no collection {collection}")
        if aliases.get(PREVIOUS_ALIAS) == collection:
            rt.store.set_aliases({PREVIOUS_ALIAS: None})
        rt.store.drop_collection(collection)
    rt.skips.drop(collection)
    return f"dropped {collection}"


def collections(rt: Runtime) -> list[CollectionInfo]:
    return rt.store.collections()
