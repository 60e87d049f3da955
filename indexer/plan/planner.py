"""Planning one shard: list it, stream its points past the listing, and say what to embed.

A planner reads; what it decides is carried out in three ways. Deletions and payload-only
changes are written at once, in chunks (writing them again is harmless: a photo deleted is not
found again, a payload is the same), the deletions once the delete guard has counted them
(indexer/plan/deleteguard.py): a shard that would lose more than the share of its points is held
back whole, and planned again, confirmed, once the job's listing is within its budget. Photos
to embed become batches that the round commits with the shard, once, in one Redis script
(indexer/queue/workqueue.py): a planner killed before its commit is planned again from the start and
nothing was sent twice. A shard that holds more than twice the shard size is split instead: its
parts join the round and the points of each part are relabelled with its first key.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from core.jobs import Jobs
from core.jobstatus import JobKind, JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import Source
from core.vectorstore import IndexedPoint, VectorStore
from indexer.photo.autotags import Tagger, with_tags
from indexer.photo.skips import SkipRecords
from indexer.photo.writer import build_payload
from indexer.plan.catalog import Photo, ShardTooBig, read_catalog
from indexer.plan.deleteguard import guarded, holds_back, reserve
from indexer.plan.diff import ShardDiff, ShardPlan, resolve
from indexer.plan.popularity import joined
from indexer.plan.shards import ShardMap, ShardRange, split_bounds
from indexer.queue.messages import Batch, ShardUnit, Unit
from indexer.queue.records import JobRecords
from indexer.queue.workqueue import WorkQueue

WRITE_CHUNK = 1000  # points per deletion, relabelling or payload request
LOOKUP_CHUNK = 256  # identities per lookup of photos that may have moved
EMIT_EVERY = 100  # a split of an empty shard hands its parts to the round this many at a time


@dataclass
class Planned:
    """What a planner commits: a record of the unit, batches, units it adds, counts."""

    record: dict[str, Any]
    batches: list[Batch] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    marks: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (value, ttl s)
    after_commit: Callable[[], None] = lambda: None  # a feed's acknowledgement


def held_units(planned: Iterable[dict[str, Any]]) -> list[ShardUnit]:
    """The shards a round held back (their records), as units of a round that confirms them."""
    return [
        ShardUnit(ShardRange(record["label"], record.get("hi")), confirm=True)
        for record in planned
        if record.get("held")
    ]


def chunks(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def keyed(point: IndexedPoint, source: Source) -> IndexedPoint:
    """A point written before shards existed carries no key: read it off its address."""
    if point.key:
        return point
    return replace(point, key=source.key_of(point.source_uri) or "")


class Writes:
    """The writes a plan makes at once, and what they count."""

    def __init__(
        self,
        store: VectorStore,
        jobs: Jobs,
        job: JobStatus,
        source: Source,
        tagger: Tagger | None = None,
    ) -> None:
        self.store, self.jobs, self.job, self.source = store, jobs, job, source
        self.tagger = tagger
        self.deleted = 0
        self.updated = 0

    def delete(self, shard: str | None, photo_ids: Sequence[str]) -> None:
        for chunk in chunks(photo_ids, WRITE_CHUNK):
            self.store.delete_in_shard(self.job.collection, shard, chunk)
            self.jobs.add(self.job.id, deleted=len(chunk), changes=len(chunk))
            self.deleted += len(chunk)

    def payloads(self, photos: Sequence[tuple[Photo, str]]) -> None:
        version = self.job.model_version
        for chunk in chunks(photos, WRITE_CHUNK):
            payloads = {
                p.photo_id: build_payload(p, self.source, version, label) for p, label in chunk
            }
            if self.tagger is not None:  # from the stored vectors: no image is embedded
                payloads = with_tags(self.store, self.job.collection, self.tagger, payloads)
            self.store.set_payloads(self.job.collection, payloads)
            self.jobs.add(self.job.id, updated=len(chunk), changes=len(chunk))
            self.updated += len(chunk)


def resolve_unmatched(
    store: VectorStore,
    readers: Executor,
    collection: str,
    source: Source,
    photos: Sequence[tuple[Photo, str]],
    bad_version: dict[str, str],
    plan: ShardPlan,
    labels: dict[str, str],
    warnings: list[str],
    tagging: str | None = None,
) -> None:
    """Photos with no point under their shard's label: new, moved from another shard, or
    another photo's id. Looked up by id in the whole collection, a chunk at a time.
    `tagging`: the key of the tags the collection's version makes now (diff.classify)."""
    for chunk in chunks(photos, LOOKUP_CHUNK):
        ids = [photo.photo_id for photo, _ in chunk]
        found = {p.photo_id: keyed(p, source) for p in store.points_by_id(collection, ids)}
        others = sorted(
            {f.key for f in found.values() if f.key} - {photo.key for photo, _ in chunk}
        )
        there = dict(zip(others, readers.map(source.stat, others), strict=True))
        for photo, label in chunk:
            point = found.get(photo.photo_id)
            other_there = point is not None and there.get(point.key) is not None
            bad = bad_version.get(photo.key)
            action = resolve(photo, point, label, bad, other_there, tagging)
            if action is None:
                assert point is not None
                warnings.append(
                    f"{photo.key}: id {photo.photo_id!r} is already used by {point.key}"
                )
                continue
            plan.add(photo, action)
            labels[photo.photo_id] = label


def batches_of(photos: Sequence[tuple[Photo, str]], size: int) -> list[Batch]:
    return [Batch(tuple(chunk)) for chunk in chunks(photos, size)]


def carry_out(
    skips: SkipRecords,
    job: JobStatus,
    writes: Writes,
    plan: ShardPlan,
    labels: dict[str, str],
    batch_size: int,
) -> tuple[list[Batch], dict[str, int]]:
    """Write the payload-only changes and the skip records; the batches (of `batch_size`
    photos) and counts to commit."""
    writes.payloads([(photo, labels[photo.photo_id]) for photo in plan.payload])
    skips.record(job.collection, plan.rejected)
    skips.forget(job.collection, plan.forget)
    embed = [(photo, labels[photo.photo_id]) for photo in plan.embed]
    counts = {
        "total": len(embed) + len(plan.rejected),
        "skipped": len(plan.rejected),
        "unchanged": plan.unchanged + plan.known_bad,
        "changes": len(embed),
    }
    return batches_of(embed, batch_size), counts


def changed_keys(plan: ShardPlan) -> list[str]:
    """The keys a plan changes something for: embedded, payload, skipped or forgotten."""
    return [
        *(photo.key for photo in plan.embed),
        *(photo.key for photo in plan.payload),
        *plan.rejected,
        *plan.forget,
    ]


def plan_shard(
    job: JobStatus,
    shard: ShardRange,
    *,
    source: Source,
    store: VectorStore,
    records: JobRecords,
    readers: Executor,
    settings: IndexerSettings,
    worker: str,
    taggers: Callable[[int], Tagger] | None = None,
    confirm: bool = False,
    now: Callable[[], float] = time.time,
) -> Planned:
    """Diff one shard of the source against its points; confirm: never held back. `readers`
    look up the photos that may have moved; `taggers` give the job's version's automatic
    tags (a point tagged otherwise is re-tagged); `now` stamps the record."""
    started = now()
    try:
        catalog = read_catalog(
            source, settings.metadata_files, shard, limit=2 * settings.shard_size
        )
        # Popularity joins the metadata: a change of it is a payload write, captured alike.
        photos = joined(list(catalog.photos.values()), records.popularity)
        catalog.photos = {photo.photo_id: photo for photo in photos}
    except ShardTooBig:
        return split_shard(
            job,
            shard,
            source=source,
            store=store,
            work=records.work,
            shard_size=settings.shard_size,
            worker=worker,
            started=started,
            now=now,
        )
    if job.kind == JobKind.REINDEX:  # what the verification asks of a difference it finds
        versions = {photo.key: photo.version for photo in photos}
        versions |= {key: version for key, (version, _) in catalog.rejected.items()}
        records.listings.record(job.id, shard, versions, started)
    skipped = records.skips.in_range(job.collection, shard.lo, shard.hi)
    tagger = taggers(job.model_version) if taggers else None
    tagging = tagger.key if tagger else None
    diff = ShardDiff(catalog, skipped, shard.lo, tagging)
    writes = Writes(store, records.jobs, job, source, tagger)
    # The ids of what is gone are held until the whole shard is seen (no more than its points,
    # as `kept`), so that the guard decides before the first deletion.
    gone: list[str] = []
    gone_keys: list[str] = []
    kept: set[str] = set()
    for point in store.points(job.collection, shard=shard.lo):
        if diff.see(point):
            gone.append(point.photo_id)
            gone_keys.append(point.key)
        else:
            kept.add(point.photo_id)
    share = settings.max_delete_share
    reserve(records.jobs, share, job, shard.id, len(gone))
    if not confirm and guarded(job) and holds_back(len(gone), len(gone) + len(kept), share):
        # Nothing is written, embedded or counted: the confirming round plans it all.
        record: dict[str, Any] = {"label": shard.lo, "hi": shard.hi, "held": len(gone)}
        record |= {"worker": worker, "started": started, "finished": now()}
        return Planned(record, counts={"held": len(gone)})
    writes.delete(shard.lo, gone)
    plan = diff.finish()
    labels = dict.fromkeys(catalog.photos, shard.lo)
    bad = {key: version for key, (version, _) in skipped.items()}
    unmatched = [(photo, shard.lo) for photo in plan.unmatched]
    resolve_unmatched(
        store,
        readers,
        job.collection,
        source,
        unmatched,
        bad,
        plan,
        labels,
        catalog.warnings,
        tagging,
    )
    batches, counts = carry_out(records.skips, job, writes, plan, labels, settings.batch_size)
    if job.kind == JobKind.SYNC:  # the live side: collections that follow it log the keys
        records.capture.capture(shard, [*gone_keys, *changed_keys(plan)])
    records.jobs.note_problems(job.id, catalog.warnings)
    rejected = (f"{k}: {reason}" for k, (_, reason) in plan.rejected.items())
    records.jobs.note_problems(job.id, rejected)
    counts["listed"] = len(catalog.photos) + len(catalog.rejected)
    # The points the shard holds once its batches are written: what verification expects of
    # a round that changed nothing.
    points = len(kept | {p.photo_id for p in plan.embed} | {p.photo_id for p in plan.payload})
    record = {
        "label": shard.lo,
        "photos": len(catalog.photos),
        "points": points,
        "changes": counts["changes"] + writes.deleted + writes.updated,
        "worker": worker,
        "started": started,
        "finished": now(),
    }
    return Planned(record, batches, counts=counts)


def split_shard(
    job: JobStatus,
    shard: ShardRange,
    *,
    source: Source,
    store: VectorStore,
    work: WorkQueue,
    shard_size: int,
    worker: str,
    started: float,
    now: Callable[[], float] = time.time,
) -> Planned:
    """Cut an oversized shard every shard_size keys; its parts are planned in this round.

    The listing streams (the bounds are all it keeps). A shard with no points yet (the first
    index of a catalogue: one shard of everything) hands its parts over to `work` as they are
    found, so planning starts long before a listing of 1e8 keys ends; one with points
    relabels them first, so that each part finds its own."""
    keys = (obj.key for obj in source.list_range(shard.lo, shard.hi))
    empty = next(iter(store.points(job.collection, shard=shard.lo)), None) is None
    bounds = [shard.lo]
    emitted = 0  # parts handed over: those starting at bounds[:emitted]
    for bound in split_bounds(keys, shard_size):
        bounds.append(bound)
        if empty and len(bounds) - 1 - emitted >= EMIT_EVERY:
            parts = [ShardRange(bounds[i], bounds[i + 1]) for i in range(emitted, len(bounds) - 1)]
            work.add_units(job.id, (ShardUnit(part) for part in parts))
            emitted = len(bounds) - 1
    if not empty:
        relabel(store, job.collection, source, shard.lo, ShardMap(bounds))
    ends: list[str | None] = [*bounds[1:], shard.hi]
    parts = [ShardRange(lo, hi) for lo, hi in zip(bounds, ends, strict=True)]
    record = {
        "label": shard.lo,
        "split": len(parts),
        "worker": worker,
        "started": started,
        "finished": now(),
    }
    # Not a shard of the round itself: its parts are (so the ETA extrapolates over them).
    counts = {"shards_total": -1, "shards_planned": -1}
    units: list[Unit] = [ShardUnit(part) for part in parts[emitted:]]
    return Planned(record, units=units, counts=counts)


def relabel(
    store: VectorStore, collection: str, source: Source, label: str, parts: ShardMap
) -> None:
    """Give the points of a split shard the label of the part their key falls in."""
    moves = (
        (new, point.photo_id)
        for point in store.points(collection, shard=label)
        if (key := keyed(point, source).key) >= label and (new := parts.label_of(key)) != label
    )
    set_labels(store, collection, moves)


def set_labels(store: VectorStore, collection: str, moves: Iterable[tuple[str, str]]) -> int:
    """Give each (label, photo id) its label, a request per label and chunk; how many."""
    pending: dict[str, list[str]] = defaultdict(list)
    count = 0
    for label, photo_id in moves:
        pending[label].append(photo_id)
        count += 1
        if len(pending[label]) >= WRITE_CHUNK:
            store.set_shard(collection, label, pending.pop(label))
    for label, photo_ids in pending.items():
        store.set_shard(collection, label, photo_ids)
    return count


def label_unlabelled(store: VectorStore, collection: str, source: Source) -> int:
    """Label the points written before shards existed (the first sync after an upgrade):
    afterwards every point is read by its shard. Their payload is rewritten by the plan that
    finds them (their key is missing); how many there were."""
    labels = ShardMap(store.shard_labels(collection))
    moves = (
        (labels.label_of(keyed(point, source).key), point.photo_id)
        for point in store.points(collection, unlabelled=True)
    )
    return set_labels(store, collection, moves)
