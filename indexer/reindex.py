"""A full reindex beside the live collection, verified before an atomic switch; rollback."""

from __future__ import annotations

import random
from collections.abc import Sequence

from indexer.catalog import Catalog
from indexer.jobs import JobState
from indexer.runtime import Runtime
from indexer.sync import Batch, IndexerError, alias_lock, plan_into
from photosearch.embedding.arrays import Embeddings
from photosearch.querycache import prewarm
from photosearch.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    CollectionInfo,
    collection_name,
    model_version_of,
)


def start_reindex(rt: Runtime, job_id: str, model_version: int, source_uri: str) -> list[Batch]:
    """Create the new collection and plan every photo of the source into it."""
    if not rt.run(rt.embedder.is_ready(model_version)):
        raise IndexerError(
            f"model version {model_version} is not loaded in Triton: export it, then run "
            "`photosearch triton load` (or restart Triton) before reindexing"
        )
    dim = rt.embedder.manifest(model_version).embedding_dim
    collection = collection_name(model_version, job_id)
    rt.store.create_collection(collection, dim)
    rt.jobs.start(
        job_id,
        state=JobState.PLANNING,
        source=source_uri,
        collection=collection,
        model_version=model_version,
    )
    batches, _, _ = plan_into(rt, job_id, source_uri, collection, "r")
    rt.jobs.update(job_id, state=JobState.RUNNING)
    return batches


def verify(rt: Runtime, collection: str, catalog: Catalog) -> None:
    """Every indexable photo of the source is there and nothing else; sample searches answer."""
    indexed = {v.photo_id for v in rt.store.versions(collection)}
    stored = rt.store.count(collection)
    if stored != len(indexed):
        raise IndexerError(f"{collection} counts {stored} points but lists {len(indexed)}")
    skipped = rt.jobs.skipped(collection)
    missing = [
        photo_id
        for photo_id, photo in catalog.photos.items()
        if photo_id not in indexed and skipped.get(photo_id, ("", ""))[0] != photo.version
    ]
    extra = indexed - catalog.photos.keys()
    if missing or extra:
        raise IndexerError(
            f"{collection} does not match the source: {len(missing)} photos missing "
            f"{missing[:5]}, {len(extra)} not in the source {sorted(extra)[:5]}"
        )
    sample = random.sample(sorted(indexed), min(rt.settings.indexer.verify_samples, len(indexed)))
    for record in rt.store.retrieve(collection, sample, with_vectors=True):
        assert record.vector is not None
        hits = rt.store.search(collection, record.vector, limit=1)
        # A duplicate photo may rank first instead: the score, not the id, shows it answered.
        if not hits or hits[0].score < 0.99:
            raise IndexerError(f"a sample search for {record.photo_id} in {collection} failed")


def finalize(rt: Runtime, job_id: str) -> list[Batch]:
    """Catch up with what changed meanwhile; when nothing did, verify and switch the alias.

    Returns catch-up batches to send (this runs again after they complete), or [] when done.
    """
    job = rt.jobs.get(job_id)
    if job is None or job.state in (JobState.DONE, JobState.FAILED):
        return []
    rt.jobs.update(job_id, state=JobState.FINALIZING)
    collection = job.collection
    with alias_lock(rt):
        batches, _, catalog = plan_into(rt, job_id, job.source, collection, f"c{job.rounds + 1}")
        rt.jobs.add(job_id, rounds=1)
        if batches:
            if job.rounds + 1 > rt.settings.indexer.catch_up_rounds:
                raise IndexerError(
                    f"the source still changed after {job.rounds} catch-up passes; "
                    "run the reindex again at a quieter time"
                )
            rt.jobs.update(job_id, state=JobState.RUNNING)
            return batches
        verify(rt, collection, catalog)
        rt.store.optimize(collection)
        warmed = warm_cache(rt, job_id, model_version_of(collection))
        live = rt.store.aliases().get(LIVE_ALIAS)
        rt.store.set_aliases({LIVE_ALIAS: collection, PREVIOUS_ALIAS: live})
    rt.jobs.finish(
        job_id,
        JobState.DONE,
        f"{LIVE_ALIAS} switched from {live} to {collection}; {warmed} popular queries pre-warmed",
    )
    return []


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
    rt.jobs.drop_skipped(collection)
    return f"dropped {collection}"


def collections(rt: Runtime) -> list[CollectionInfo]:
    return rt.store.collections()
