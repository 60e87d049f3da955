"""Benchmark the indexer at scale: what planning holds and how fast it goes, what the broker
holds, and photos/s end to end, on synthetic catalogues of 1e5 and 1e6 small photos.

    python -m loadtests.bench_scale [--sizes 100000,1000000] [--shard-size 10000] [--no-e2e]
    python -m loadtests.bench_scale --reindex [--sizes ...] [--changes 1000] [--drain 100]

For each size, a folder of that many 32x32 JPEGs (a few hundred distinct ones, written over and
over, in folders of 1000), a Redis of its own, and the tiny test model (random weights) in
Triton. Then:

1. planning, as one planner task does it, in this process (one planner = one worker thread):
   the first sync's split of a catalogue it has never seen (one streaming listing), then every
   shard of the empty collection (a reindex's load); the Python heap each step peaks at
   (tracemalloc, on a separate pass: it slows allocation), and photos listed per second;
2. the collection filled with a point per photo (synthetic vectors) and 1% of the files
   rewritten: every shard of the nightly full sync (a diff against its points), the same two
   figures; then the reindex's verification of that collection (a count per shard, the keys
   and versions of sampled shards): its peak heap;
3. end to end, unless --no-e2e: a `photosearch worker` process syncs the folder into a new
   embedded store through Triton, the embed queue's length polled every millisecond.

No thresholds: the goal is planning memory at 1e6 within 1.2x of 1e5, and the broker never
past max_queued_batches, at both sizes.

--reindex measures every phase of a reindex instead, its time and peak memory at each size
(loadtests/scale_reindex.py): the load, the index build, the grouping pass, the catch-up's
replay (the goal: its cost per change at 1e6 within 1.2x of 1e5), verification and the
switch's live lock.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobKind
from core.settings import Settings
from core.sources import LocalSource
from core.submit import queue_sync
from core.taskqueue import create_celery, embed_queue
from core.vectorstore import PhotoPoint, collection_name, open_store
from harness.models import TINY_CONFIG
from harness.observe import QueueWatch
from harness.photos import DISTINCT, small_photo, write_catalogue
from harness.processes import (
    bench_settings,
    process_env,
    redis_process,
    running,
    triton_ports,
    worker_process,
)
from indexer.jobs.units import plan_shard
from indexer.jobs.verify import compare
from indexer.plan.shards import ShardMap, ShardRange, load_map
from indexer.runtime import Runtime
from loadtests.registry import Figure

MB = 1 << 20
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


@dataclass
class ScaleFigures:
    shard_size: int
    batch_size: int
    max_queued: int
    sizes: list[SizeFigures] = field(default_factory=list)

    @property
    def small(self) -> SizeFigures:
        return self.sizes[0]

    @property
    def large(self) -> SizeFigures:
        return self.sizes[-1]

    @property
    def memory_ratio(self) -> float:
        """Planner peak heap, largest catalogue / smallest: the issue asks <= 1.2."""
        return self.large.planner_peak_mb / self.small.planner_peak_mb


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
    parts = units_of(rt, job_id) + [ShardRange.from_wire(u) for _, u in planned.units]
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
        payload = {
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
                samples=rt.settings.indexer.verify_samples,
            )
        )
        verify_peak = peak()
    rt.store.drop_collection(collection)
    return SizeFigures(
        photos, split_pass, load_pass, nightly, verify_peak, verify_s, photos / fill_s
    )


def redis_calls(redis_url: str) -> int:
    """Commands the Redis has served so far (INFO commandstats)."""
    client = Redis.from_url(redis_url)
    try:
        stats: dict[str, dict[str, int]] = client.info("commandstats")
    finally:
        client.close()
    return sum(int(stat["calls"]) for stat in stats.values())


def end_to_end(
    work: Path, repo: Path, triton_url: str, redis_url: str, root: Path, args: argparse.Namespace
) -> tuple[float, float, int, float]:
    values = bench_settings(
        work / "e2e-data",
        triton_url,
        repo,
        redis_url,
        batch_size=args.batch_size,
        shard_size=args.shard_size,
        cpu_chunk=args.batch_size,  # the tiny model: no search waits behind it here
        max_queued_batches=args.max_queued,
    )
    settings = Settings(**values)
    jobs, app = Jobs.from_settings(settings), create_celery(settings)
    calls = redis_calls(redis_url)
    # The worker closes its embedded store on SIGTERM: at 1e6 points that took past 60 s.
    worker = worker_process(process_env(values), work / "worker.log", args.concurrency, 900)
    with QueueWatch(redis_url, embed_queue(settings)) as watch, running(worker):
        job = jobs.wait(queue_sync(app, jobs, str(root)), timeout_s=7200)
    app.close()
    # The watch's own LLENs, every millisecond, are not the indexer's.
    calls = redis_calls(redis_url) - calls - watch.samples
    assert job is not None and job.state == "done" and job.failed == 0, job
    shutil.rmtree(work / "e2e-data", ignore_errors=True)
    return job.images_per_s, job.elapsed_s, watch.longest, calls / job.batches_total


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="100000,1000000", help="catalogue sizes, comma-separated"
    )
    parser.add_argument("--shard-size", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-queued", type=int, default=8, help="max_queued_batches")
    parser.add_argument("--concurrency", type=int, default=2, help="the e2e worker's threads")
    parser.add_argument("--no-e2e", dest="e2e", action="store_false", help="planning only")
    parser.add_argument("--work", type=Path, help="a folder for the catalogues (default: temp)")
    reindex = parser.add_argument_group("--reindex: every phase of a reindex")
    reindex.add_argument("--reindex", action="store_true", help="measure a reindex's phases")
    reindex.add_argument("--changes", type=int, default=1000, help="changes the catch-up replays")
    reindex.add_argument("--drain", type=int, default=100, help="changes the switch replays")
    reindex.add_argument("--dim", type=int, default=512, help="the new model's vector size")
    reindex.add_argument(
        "--group-shards",
        type=int,
        default=0,
        help="group only this many shards and extrapolate the pass's time (0: every shard)",
    )
    reindex.add_argument(
        "--load-only-above",
        type=int,
        default=0,
        metavar="PHOTOS",
        help="stop larger sizes after the load: 1e6 x 512 takes most of an hour to index on 2 "
        "busy cores (0: every phase at every size)",
    )
    return parser


def measure(args: argparse.Namespace) -> ScaleFigures:
    from model.export import export_model
    from model.triton_server import TritonServer

    figures = ScaleFigures(args.shard_size, args.batch_size, args.max_queued)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        repo = work / "models"
        export_model(str(TINY_CONFIG), "none", repo)
        redis, redis_url = redis_process(work)
        with running(redis), TritonServer(repo, triton_ports(), work / "triton") as triton:
            for photos in (int(n) for n in args.sizes.split(",")):
                root = work / f"photos{photos}"
                started = time.perf_counter()
                write_catalogue(root, photos)
                seconds = time.perf_counter() - started
                print(f"{photos} photos written in {seconds:.0f} s", flush=True)
                values = bench_settings(
                    work / "plan-data",
                    triton.url,
                    repo,
                    redis_url,
                    shard_size=args.shard_size,
                    batch_size=args.batch_size,
                )
                settings = Settings(**values)
                store = open_store(settings)
                rt = Runtime(settings, store=store)
                try:
                    size = planning(rt, root, photos, dim=32)
                finally:
                    rt.close()
                    store.close()
                shutil.rmtree(work / "plan-data", ignore_errors=True)
                if args.e2e:
                    print(f"  {photos}: end to end ...", flush=True)
                    (
                        size.e2e_photos_per_s,
                        size.e2e_s,
                        size.broker_longest,
                        size.redis_calls_per_batch,
                    ) = end_to_end(work, repo, triton.url, redis_url, root, args)
                figures.sizes.append(size)
                shutil.rmtree(root)
                print(f"  {photos}: {size}", flush=True)
    return figures


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def sizes(f: ScaleFigures) -> str:
    return f"{f.small.photos} and {f.large.photos} photos, shards of {f.shard_size}"


def heap_context(f: ScaleFigures, size: SizeFigures) -> str:
    return (
        f"{size.photos} photos: the worst step of the split ({size.split.peak_mb:.1f} MB), "
        f"a reindex's load ({size.load.peak_mb:.1f}) and a nightly full sync "
        f"({size.nightly.peak_mb:.1f}), shards of {f.shard_size}"
    )


FIGURES: list[Figure[ScaleFigures]] = [
    Figure(
        "planner peak heap, smaller catalogue",
        "MB",
        lambda f: f.small.planner_peak_mb,
        lambda f: heap_context(f, f.small),
    ),
    Figure(
        "planner peak heap, larger catalogue",
        "MB",
        lambda f: f.large.planner_peak_mb,
        lambda f: heap_context(f, f.large),
    ),
    Figure(
        "planner peak heap, larger / smaller catalogue",
        "x",
        lambda f: f.memory_ratio,
        lambda f: f"asked: within 1.2x; {sizes(f)}",
    ),
    Figure(
        "the first sync's split of a catalogue (one listing)",
        "keys/s",
        lambda f: f.large.split.photos_per_s,
        lambda f: (
            f"{f.large.photos} keys listed and cut into shards by one planner "
            f"({f.small.split.photos_per_s:.0f}/s at {f.small.photos})"
        ),
    ),
    Figure(
        "planning a reindex's load, one planner",
        "photos/s",
        lambda f: f.large.load.photos_per_s,
        lambda f: (
            f"{f.large.load.steps} shards of an empty collection "
            f"({f.small.load.photos_per_s:.0f}/s at {f.small.photos})"
        ),
    ),
    Figure(
        "planning a nightly full sync, 1% changed, one planner",
        "photos/s",
        lambda f: f.large.nightly.photos_per_s,
        lambda f: (
            f"{f.large.photos} photos against their points "
            f"({f.small.nightly.photos_per_s:.0f}/s at {f.small.photos})"
        ),
    ),
    Figure(
        "verification peak heap, larger catalogue",
        "MB",
        lambda f: f.large.verify_peak_mb,
        lambda f: (
            f"a count per shard and sample searches over {f.large.photos} points in "
            f"{f.large.verify_s:.2f} s ({f.small.verify_peak_mb:.2f} MB at {f.small.photos})"
        ),
    ),
    Figure(
        "the broker's longest embed queue, larger catalogue",
        "batches",
        lambda f: float(f.large.broker_longest or 0),
        lambda f: (
            f"asked: never past max_queued_batches ({f.max_queued}); "
            f"{f.small.broker_longest} at {f.small.photos}"
        ),
    ),
    Figure(
        "Redis commands per embedding batch",
        "calls",
        lambda f: f.large.redis_calls_per_batch or 0.0,
        lambda f: (
            "everything the sync asked the queue's Redis (the broker, the job's scripts, "
            f"Celery's acks), batches of {f.batch_size}, larger catalogue"
        ),
    ),
    Figure(
        "Qdrant Edge upserts, larger catalogue",
        "points/s",
        lambda f: f.large.upserts_per_s,
        lambda f: f"1000 points a request, {f.large.photos} points of 32 dims",
    ),
    Figure(
        "indexing end to end, larger catalogue",
        "photos/s",
        lambda f: f.large.e2e_photos_per_s or 0.0,
        lambda f: (
            f"32x32 JPEGs, the tiny test model, a worker of 2 threads, batches of "
            f"{f.batch_size} ({f.small.e2e_photos_per_s or 0:.0f}/s at {f.small.photos})"
        ),
    ),
]


def main() -> None:
    args = parser().parse_args()
    if args.reindex:
        # Imported here: that module builds on this one's catalogue.
        from loadtests.scale_reindex import run

        run(args)
        return
    f = measure(args)
    print(
        f"\nshards of {f.shard_size}, batches of {f.batch_size}, max_queued_batches {f.max_queued}"
    )
    print(
        "| photos | split keys/s | load photos/s | nightly photos/s | planner peak MB "
        "| verify peak MB | upserts/s | e2e photos/s | broker longest | Redis calls/batch |\n"
        + "|---:" * 10
        + "|"
    )
    for s in f.sizes:
        e2e = "-" if s.e2e_photos_per_s is None else f"{s.e2e_photos_per_s:.0f}"
        broker = "-" if s.broker_longest is None else str(s.broker_longest)
        calls = "-" if s.redis_calls_per_batch is None else f"{s.redis_calls_per_batch:.1f}"
        print(
            f"| {s.photos} | {s.split.photos_per_s:.0f} | {s.load.photos_per_s:.0f} "
            f"| {s.nightly.photos_per_s:.0f} | {s.planner_peak_mb:.1f} | {s.verify_peak_mb:.2f} "
            f"| {s.upserts_per_s:.0f} | {e2e} | {broker} | {calls} |"
        )
    print(f"\nplanner peak heap, largest / smallest: {f.memory_ratio:.2f}x (goal <= 1.2)")


if __name__ == "__main__":
    main()
