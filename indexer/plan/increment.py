"""The nightly increment: plan the keys a change feed reported, not the whole catalogue.

Each key is asked for its state now (a stat per key: a HEAD on S3) and looked up in the live
collection by key, so the cost is the night's changes: no listing. A changed manifest re-plans
the shards under its folder, as a sync would (the root's: every shard). A chunk's deletions
are counted against the job's budget before any is made (indexer/plan/deleteguard.py); a chunk
refused is not committed, so the feed keeps its changes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import PurePosixPath

from core.jobstatus import JobKind, JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import Source, is_photo
from core.vectorstore import VectorStore
from indexer.photo.autotags import Tagger
from indexer.plan.catalog import Manifests, folder_of, photo_of, refusal
from indexer.plan.deleteguard import DeletesRefused, reserve
from indexer.plan.diff import ShardPlan, classify
from indexer.plan.feed import Feed
from indexer.plan.planner import (
    Planned,
    Writes,
    carry_out,
    resolve_unmatched,
)
from indexer.plan.popularity import joined
from indexer.plan.shards import load_map, prefix_range
from indexer.queue.messages import FeedUnit, ShardUnit, Unit
from indexer.queue.records import JobRecords


def plan_feed(
    job: JobStatus,
    seq: int,
    feed: Feed,
    *,
    source: Source,
    store: VectorStore,
    records: JobRecords,
    readers: Executor,
    settings: IndexerSettings,
    worker: str,
    taggers: Callable[[int], Tagger] | None = None,
    now: Callable[[], float] = time.time,
) -> Planned:
    """One chunk of the `feed` (opened for it, closed here once the chunk is acknowledged or
    fails): its keys planned, the next chunk as a new unit if it has more."""
    started = now()
    try:
        chunk = feed.read(settings.feed_chunk, until=job.started_at)
        try:
            planned = plan_keys(
                job,
                f"feed:{seq}",
                chunk.keys,
                source=source,
                store=store,
                records=records,
                readers=readers,
                settings=settings,
                worker=worker,
                started=started,
                taggers=taggers,
            )
        except DeletesRefused:
            chunk.give_back()
            raise
    except BaseException:
        feed.close()
        raise
    planned.record["feed"] = seq
    planned.marks.update(chunk.marks)
    if chunk.more:
        planned.units.append(FeedUnit(seq + 1))

    def acknowledge() -> None:
        try:
            chunk.ack()
        finally:
            feed.close()

    planned.after_commit = acknowledge
    return planned


def plan_keys(
    job: JobStatus,
    unit_id: str,
    keys: list[str],
    *,
    source: Source,
    store: VectorStore,
    records: JobRecords,
    readers: Executor,
    settings: IndexerSettings,
    worker: str,
    started: float,
    taggers: Callable[[int], Tagger] | None = None,
    now: Callable[[], float] = time.time,
) -> Planned:
    """What the changed keys need in the live collection; `readers` ask each key's state,
    `taggers` give the automatic tags of the job's version (planner.plan_shard)."""
    names = settings.metadata_files
    changed_manifests = [k for k in keys if PurePosixPath(k).name in names]
    wanted = [k for k in keys if PurePosixPath(k).name not in names]
    found = dict(zip(wanted, readers.map(source.stat, wanted), strict=True))
    points = {p.key: p for p in store.points_by_key(job.collection, wanted)}
    skipped = records.skips.get(job.collection, wanted)
    shards = load_map(store, job.collection)
    if job.kind == JobKind.INCREMENT:  # the live side: collections that follow it log the keys
        records.capture.capture_mapped(shards, keys)
    if job.kind == JobKind.REINDEX:  # a replay: what it read, for the verification
        records.listings.saw(job.id, {k: o.version if o else None for k, o in found.items()})
    here = {key for key, obj in found.items() if obj is not None and is_photo(key)}
    manifests = Manifests(source, names, here.__contains__, lambda _: False)
    manifests.load_above(here, unless=lambda _: False, threads=readers)

    tagger = taggers(job.model_version) if taggers else None
    tagging = tagger.key if tagger else None
    writes = Writes(store, records.jobs, job, source, tagger)
    plan = ShardPlan()
    labels: dict[str, str] = {}
    unmatched = []
    gone: dict[str | None, list[str]] = defaultdict(list)  # shard -> ids, deleted once counted
    for key in wanted:
        obj, point, bad = found[key], points.get(key), skipped.get(key)
        if obj is None:
            if point is not None:
                gone[point.shard].append(point.photo_id)
            if bad is not None:
                plan.forget.append(key)
            continue
        if not is_photo(key):
            if bad is None or bad[0] != obj.version:
                suffix = PurePosixPath(key).suffix or "(no extension)"
                plan.rejected[key] = (obj.version, f"unsupported file type {suffix}")
            continue
        (photo,) = joined([photo_of(obj, manifests.rows.get(key))], records.popularity)
        why = refusal(photo)
        if why is not None:  # a point of it (an earlier id, say) goes as the listing's would
            if point is not None:
                gone[point.shard].append(point.photo_id)
            if bad is None or bad[0] != obj.version:
                plan.rejected[key] = (obj.version, why)
            continue
        label = shards.label_of(key)
        labels[photo.photo_id] = label
        if point is not None and point.photo_id != photo.photo_id:
            gone[point.shard].append(point.photo_id)  # the manifest gave the file a new id
            point = None
        if point is None:
            unmatched.append((photo, label))
        else:
            plan.add(photo, classify(photo, point, label, bad[0] if bad else None, tagging))
    reserve(records.jobs, settings.max_delete_share, job, unit_id, sum(map(len, gone.values())))
    for shard, ids in gone.items():
        writes.delete(shard, ids)
    warnings = list(manifests.warnings)
    versions = {key: version for key, (version, _) in skipped.items()}
    resolve_unmatched(
        store, readers, job.collection, source, unmatched, versions, plan, labels, warnings, tagging
    )
    batches, counts = carry_out(records.skips, job, writes, plan, labels, settings.batch_size)
    records.jobs.note_problems(job.id, warnings)
    records.jobs.note_problems(
        job.id, (f"{k}: {reason}" for k, (_, reason) in plan.rejected.items())
    )
    counts["listed"] = len(keys)
    # A manifest changed: the shards under its folder are planned again, listing included.
    units: list[Unit] = [
        ShardUnit(shard)
        for key in changed_manifests
        for shard in shards.overlapping(*prefix_range(folder_of(key)))
    ]
    record = {
        "keys": len(keys),
        "changes": counts["changes"] + writes.deleted + writes.updated,
        "worker": worker,
        "started": started,
        "finished": now(),
    }
    return Planned(record, batches, units=units, counts=counts)
