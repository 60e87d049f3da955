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
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from core.jobs import Jobs
from core.settings import Settings
from core.submit import queue_sync
from core.taskqueue import create_celery, embed_queue
from harness.models import TINY_CONFIG
from harness.observe import QueueWatch
from harness.processes import (
    bench_settings,
    process_env,
    redis_process,
    running,
    triton_ports,
    worker_process,
)
from loadtests.registry import Figure
from loadtests.scale_catalogue import catalogues, parser, runtime
from loadtests.scale_planning import SizeFigures, planning


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
            for photos, root in catalogues(work, args.sizes):
                with runtime(work / "plan-data", triton.url, repo, redis_url, args) as rt:
                    size = planning(rt, root, photos, dim=32)
                if args.e2e:
                    print(f"  {photos}: end to end ...", flush=True)
                    (
                        size.e2e_photos_per_s,
                        size.e2e_s,
                        size.broker_longest,
                        size.redis_calls_per_batch,
                    ) = end_to_end(work, repo, triton.url, redis_url, root, args)
                figures.sizes.append(size)
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
