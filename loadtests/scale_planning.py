"""The scale benchmark's planning: each step as one planner task does it, in this process (one
planner = one worker thread), timed, then traced for the Python heap it peaks at."""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from core.jobstatus import JobKind
from core.payload import PhotoPayload
from core.sources import LocalSource
from core.vectorstore import PhotoPoint, collection_name
from harness.photos import DISTINCT, small_photo
from indexer.jobs.units import plan_shard
from indexer.jobs.verify import compare
from indexer.plan.shards import ShardMap, ShardRange, load_map
from indexer.queue.messages import ShardUnit
from indexer.runtime import Runtime
from loadtests.scale_catalogue import MB

T = TypeVar("T")


@dataclass
class Pass:
    """One planning pass: photos listed per second, and the largest heap one step held."""

    photos_per_s: float
    peak_mb: float
    steps: int


@dataclass
class SizeFigures:
    photos: int
    split: Pass  # the first sync's split: one streaming listing of everything
    load: Pass  # every shard of an empty collection
    nightly: Pass  # every shard of a full collection, 1% changed
    verify_peak_mb: float
    verify_s: float
    upserts_per_s: float  # points written into Qdrant Edge, 1000 a request
    e2e_photos_per_s: float | None = None
    e2e_s: float | None = None
    broker_longest: int | None = None
    redis_calls_per_batch: float | None = None  # every command the e2e sync sent Redis

    @property
    def planner_peak_mb(self) -> float:
        return max(self.split.peak_mb, self.load.peak_mb, self.nightly.peak_mb)


@contextmanager
def traced() -> Iterator[Callable[[], float]]:
    """Trace the heap; yields a function that returns the peak (MB) since it was last called.
    Garbage is collected first: the peak is what one step held, not a previous step's cycles
    the collector had not reached yet."""
    tracemalloc.start()

    def peak() -> float:
        value = tracemalloc.get_traced_memory()[1] / MB
        gc.collect()
        tracemalloc.reset_peak()
        return value

    gc.collect()
    tracemalloc.reset_peak()

    try:
        yield peak
    finally:
        tracemalloc.stop()


def timed(work: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def units_of(rt: Runtime, job_id: str) -> list[ShardRange]:
    raw: list[bytes] = rt.redis.lrange(rt.work.keys(job_id)[1], 0, -1)  # type: ignore[assignment]
    return [ShardRange.from_wire(json.loads(u)) for u in raw]


def plan_every_shard(rt: Runtime, job_id: str, shards: list[ShardRange], photos: int) -> Pass:
    """Plan each shard twice: once timed, once under tracemalloc (peak of the worst shard)."""
    job = rt.jobs.get(job_id)
    assert job is not None
    plans, seconds = timed(lambda: [plan_shard(rt, job, s, "bench") for s in shards])
    records = {shard.id: plan.record for shard, plan in zip(shards, plans, strict=True)}
    rt.redis.hset(rt.work.keys(job_id)[9], mapping={k: json.dumps(v) for k, v in records.items()})
    del plans
    worst = 0.0
    with traced() as peak:
        for shard in shards:
            plan_shard(rt, job, shard, "bench")
            worst = max(worst, peak())
    return Pass(photos / seconds, worst, len(shards))


def split(rt: Runtime, job_id: str, photos: int) -> tuple[Pass, list[ShardRange]]:
    """The first sync's split of one shard of everything, timed, then traced."""
    job = rt.jobs.get(job_id)
    assert job is not None
    whole = ShardRange("")
    planned, seconds = timed(lambda: plan_shard(rt, job, whole, "bench"))
    parts = units_of(rt, job_id) + [u.shard for u in planned.units if isinstance(u, ShardUnit)]
    parts = parts or [whole]  # small enough to stay one shard
    rt.work.drop(job_id, 60)
    with traced() as peak:
        plan_shard(rt, job, whole, "bench")
        worst = peak()
    rt.work.drop(job_id, 60)
    return Pass(photos / seconds, worst, 1), parts


def fill(rt: Runtime, collection: str, root: Path, shards: ShardMap, dim: int) -> None:
    """A point per photo as a sync writes it (key, version, shard label), synthetic vectors."""
    rng = np.random.default_rng(0)
    chunk: list[PhotoPoint] = []
    for obj in LocalSource(root).list_range():
        payload: PhotoPayload = {
            "source_key": obj.key,
            "content_version": obj.version,
            "meta_hash": "",
            "shard": shards.label_of(obj.key),
            "model_version": 1,
        }
        vector = rng.standard_normal(dim).astype(np.float32)
        chunk.append(PhotoPoint(obj.key, vector / np.linalg.norm(vector), payload))
        if len(chunk) == 1000:
            rt.store.upsert(collection, chunk)
            chunk = []
    rt.store.upsert(collection, chunk)


def change_one_percent(root: Path) -> None:
    other = small_photo(DISTINCT + 1)
    for n, path in enumerate(sorted(root.rglob("*.jpg"))):
        if n % 100 == 0:
            path.write_bytes(other)


def planning(rt: Runtime, root: Path, photos: int, dim: int) -> SizeFigures:
    collection = collection_name(1, f"bench{photos}")
    rt.store.create_collection(collection, dim)
    jobs = rt.jobs
    job_id = jobs.create(JobKind.SYNC, source=str(root))
    jobs.start(job_id, source=str(root), collection=collection, model_version=1)
    print(f"  {photos}: the split of a catalogue never seen ...", flush=True)
    split_pass, parts = split(rt, job_id, photos)
    print(f"  {photos}: {len(parts)} shards of an empty collection ...", flush=True)
    load_pass = plan_every_shard(rt, job_id, parts, photos)
    # The collection holds the catalogue, labelled with the parts; 1% of the files change.
    print(f"  {photos}: filling the collection ...", flush=True)
    _, fill_s = timed(lambda: fill(rt, collection, root, ShardMap(p.lo for p in parts), dim))
    change_one_percent(root)
    print(f"  {photos}: the nightly full sync's {len(parts)} shards ...", flush=True)
    nightly_job = jobs.create(JobKind.SYNC, source=str(root))
    jobs.start(nightly_job, source=str(root), collection=collection, model_version=1)
    nightly = plan_every_shard(rt, nightly_job, load_map(rt.store, collection).ranges(), photos)
    with traced() as peak:
        # Against itself: every shard's count and the sampled shards' keys and versions.
        _, verify_s = timed(
            lambda: compare(
                rt.store,
                rt.source(str(root)),
                collection,
                collection,
                pending=(),
                skipped=lambda keys: {},
                listed=lambda keys: {},
                samples=rt.settings.indexer.verify_samples,
            )
        )
        verify_peak = peak()
    rt.store.drop_collection(collection)
    return SizeFigures(
        photos, split_pass, load_pass, nightly, verify_peak, verify_s, photos / fill_s
    )
