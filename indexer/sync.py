"""The sync: bring a collection level with its source, embedding only new and changed photos."""

from __future__ import annotations

from dataclasses import dataclass

from redis.lock import Lock

from indexer.catalog import Catalog, Photo, read_catalog
from indexer.diff import SyncPlan, plan_sync
from indexer.jobs import JobState
from indexer.runtime import Runtime
from indexer.writer import build_payload
from photosearch.embedding.manifest import list_versions
from photosearch.vectorstore import LIVE_ALIAS, CollectionNotFound, collection_name
from photosearch.vectorstore.base import model_version_of


class IndexerError(Exception):
    """An indexer operation was refused; the message says why and what to do."""


@dataclass
class Batch:
    """Photos embedded by one task; the id is unique within its job."""

    batch_id: str
    photos: list[Photo]


def alias_lock(rt: Runtime) -> Lock:
    """Serializes every change of the aliases: the first collection, switch, rollback, drop."""
    lock: Lock = rt.redis.lock(f"{rt.settings.redis.prefix}:lock:aliases", timeout=3600)
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


def plan_into(
    rt: Runtime, job_id: str, source_uri: str, collection: str, phase: str
) -> tuple[list[Batch], SyncPlan, Catalog]:
    """Diff, delete what is gone, rewrite changed metadata, and return the batches to embed.

    The batches are announced in the job before they are returned, so the job's last
    completion is only counted once every batch is known.
    """
    jobs = rt.jobs
    source = rt.source(source_uri)
    catalog = read_catalog(source, rt.settings.indexer.metadata_files)
    skipped = jobs.skipped(collection)
    plan = plan_sync(
        catalog, rt.store.versions(collection), {k: v for k, (v, _) in skipped.items()}
    )
    model_version = model_version_of(collection)
    rt.store.delete(collection, plan.gone)
    for photo in plan.payload_only:
        rt.store.set_payload(
            collection, photo.photo_id, build_payload(photo, source, model_version)
        )
    jobs.record_skipped(collection, plan.rejected)
    jobs.forget_skipped(collection, plan.forget + plan.gone)
    jobs.note_problems(job_id, catalog.warnings)
    jobs.note_problems(job_id, (f"{key}: {reason}" for key, (_, reason) in plan.rejected.items()))
    size = rt.settings.indexer.batch_size
    batches = [
        Batch(f"{phase}-{n}", plan.embed[start : start + size])
        for n, start in enumerate(range(0, len(plan.embed), size))
    ]
    jobs.add(
        job_id,
        total=len(plan.rejected),
        skipped=len(plan.rejected),
        deleted=len(plan.gone),
        updated=len(plan.payload_only),
        unchanged=plan.unchanged + plan.known_bad,
    )
    jobs.add_batches(job_id, len(batches), len(plan.embed))
    return batches, plan, catalog


def run_sync(rt: Runtime, job_id: str, source_uri: str) -> list[Batch]:
    """Plan a sync of the live collection; the job is done at once when nothing is to embed."""
    collection = live_collection(rt, job_id)
    rt.jobs.start(
        job_id,
        state=JobState.PLANNING,
        source=source_uri,
        collection=collection,
        model_version=model_version_of(collection),
    )
    rt.jobs.remember("source", source_uri)
    lock = rt.redis.lock(f"{rt.settings.redis.prefix}:lock:sync:{collection}", timeout=3600)
    with lock:
        batches, _, _ = plan_into(rt, job_id, source_uri, collection, "s")
    if batches:
        rt.jobs.update(job_id, state=JobState.RUNNING)
    else:
        rt.jobs.finish(job_id, JobState.DONE, "nothing to embed")
    return batches
