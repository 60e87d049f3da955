"""`python -m loadtests.bench_repair`: a reindex of 10,000 photos while 1% of them change
unannounced: the differences its verification repairs, the time the repair adds, the replays.

A catalogue of small JPEGs (bench_scale's) and a live collection as a sync leaves it. Then 1%
of the photos change with no sync or increment told (a third written, a third overwritten, a
third deleted: a bucket whose events came late or never), a reindex lists and loads the
catalogue, and after its load the same photos change again, unannounced (the written ones
deleted, the overwritten ones overwritten again, the deleted ones written again): the live and
the new collection now differ on each, and the source explains each. The reindex's steps run
in this process as the indexer's tasks run them (loadtests/jobtasks.py: the embedding is
synthetic vectors, no Triton), one at a time, each step timed, until it switches.

The verification compares every shard's keys (`verify_samples` set to the number of shards),
so that it finds every difference; with the default (5 ranges drawn, and every range whose
count differs) it finds those of the ranges it reads, and the next sync the rest.

The time the repair adds: the verification that found the differences and the replay round
of them (the passing verification after it would have run anyway). Also the bytes the load's
listings take in Redis, a photo, and what that makes at 1e8.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.jobstatus import JobPhase, JobState, JobStatus
from core.settings import Settings
from core.vectorstore import open_store
from harness.photos import DISTINCT, small_photo, write_catalogue
from harness.processes import bench_settings, free_ports, redis_process, running
from indexer.jobs.units import advance
from indexer.runtime import Runtime
from loadtests.jobtasks import Clustered, Worker, begin_reindex
from loadtests.livechanges import Changes, fill_live
from loadtests.registry import Figure

PER_CLUSTER = 100  # photos per cluster centre of the synthetic vectors
AT_SCALE = 100_000_000  # the catalogue the listings' bytes are projected to


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--photos", type=int, default=10_000)
    p.add_argument("--share", type=float, default=0.01, help="photos changed unannounced")
    p.add_argument("--shard-size", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=512, help="the new model's vector size")
    p.add_argument("--work", type=Path, help="a folder for the catalogue (default: temp)")
    return p


@dataclass
class Step:
    what: str
    seconds: float


@dataclass
class RepairRun:
    photos: int
    shards: int
    changed: int  # photos changed unannounced, before the listing and again after the load
    job: JobStatus | None = None
    steps: list[Step] = field(default_factory=list)
    listing_bytes: int = 0  # the load's listings, as Redis holds them

    @property
    def added_s(self) -> float:
        """The verification that found the differences, and the replay round of them."""
        return sum(s.seconds for s in self.steps if s.what.startswith("repair"))

    @property
    def passing_s(self) -> float:
        return sum(s.seconds for s in self.steps if s.what == "verification: passed")

    @property
    def bytes_a_photo(self) -> float:
        return self.listing_bytes / self.photos


def change_again(root: Path, keys: list[str]) -> None:
    """The same photos, after the load: written ones deleted, overwritten ones overwritten
    again, deleted ones written again (bench_scale's names: n… beside p…)."""
    for i, key in enumerate(keys):
        path = root / key
        if key.rsplit("/", 1)[-1].startswith("n"):
            path.unlink()
        else:
            path.write_bytes(small_photo(DISTINCT + 20 + i % 8))


def steps_to_the_switch(rt: Runtime, worker: Worker, job_id: str, run: RepairRun) -> None:
    """Advance and run rounds until the job ends, naming and timing each step."""
    repaired = False
    for _ in range(50):  # a ceiling: a handful of steps switch
        before = rt.jobs.get(job_id)
        assert before is not None
        started = time.perf_counter()
        advance(rt, job_id)
        seconds = time.perf_counter() - started
        job = rt.jobs.get(job_id)
        assert job is not None
        if job.state != JobState.FINALIZING and job.state != JobState.RUNNING:
            run.steps.append(Step("the aliases' move", seconds))
            return
        if job.repair_rounds > before.repair_rounds:
            run.steps.append(Step("repair: verification that found them", seconds))
            repaired = True
        elif job.phase == JobPhase.SWITCH and before.phase != JobPhase.SWITCH:
            run.steps.append(Step("verification: passed", seconds))
        else:
            run.steps.append(Step(f"{job.phase}: step", seconds))
        started = time.perf_counter()
        worker.round(job_id)
        seconds = time.perf_counter() - started
        name = "repair: replay round" if repaired else f"{job.phase}: round"
        run.steps.append(Step(name, seconds))
        repaired = False
    raise RuntimeError(f"job {job_id} did not switch: {rt.jobs.get(job_id)}")


def measure(args: argparse.Namespace) -> RepairRun:
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        redis, redis_url = redis_process(work)
        (unused,) = free_ports(1)  # nothing asks Triton: an address where none answers
        root = work / "photos"
        write_catalogue(root, args.photos)
        shards = math.ceil(args.photos / args.shard_size)
        values = bench_settings(
            work / "data",
            f"127.0.0.1:{unused}",
            work / "models",
            redis_url,
            shard_size=args.shard_size,
            batch_size=args.batch_size,
            verify_samples=shards + 10,  # every shard's keys compared (the module says why)
        )
        with running(redis):
            settings = Settings(**values)
            store = open_store(settings)
            rt = Runtime(settings, store=store)
            try:
                return repair_run(rt, root, args)
            finally:
                rt.close()
                store.close()


def repair_run(rt: Runtime, root: Path, args: argparse.Namespace) -> RepairRun:
    photos = args.photos
    print(f"{photos}: the live collection ...", flush=True)
    _, shards = fill_live(rt, root, args.shard_size)
    unannounced = Changes(root, photos).make(round(photos * args.share))
    run = RepairRun(photos, len(shards.ranges()), len(unannounced))
    worker = Worker(rt, Clustered(args.dim, max(1, photos // PER_CLUSTER)))
    job_id, _ = begin_reindex(rt, root, args.dim)
    print(f"{photos}: the load ...", flush=True)
    worker.round(job_id, plan_only=True)
    run.listing_bytes = rt.records.listings.size(job_id)
    worker.round(job_id)
    advance(rt, job_id)  # the index build; the grouping round opened
    worker.round(job_id)
    advance(rt, job_id)  # catch-up: a replay of nothing (nothing was announced)
    worker.round(job_id)
    change_again(root, unannounced)
    print(f"{photos}: {len(unannounced)} photos changed again; to the switch ...", flush=True)
    steps_to_the_switch(rt, worker, job_id, run)
    run.job = rt.jobs.get(job_id)
    return run


def report(run: RepairRun) -> None:
    job = run.job
    assert job is not None
    print(f"\n{run.photos:,} photos in {run.shards} shards; {run.changed} changed unannounced")
    print(f"job {job.state}: {job.message}")
    print(
        f"repaired {job.repaired} differences in {job.repair_rounds} rounds; "
        f"keys replayed {job.replayed}"
    )
    for step in run.steps:
        print(f"  {step.what:<40} {step.seconds:8.3f} s")
    print(f"the repair added {run.added_s:.3f} s (the passing verification: {run.passing_s:.3f} s)")
    print(
        f"the load's listings in Redis: {run.listing_bytes:,} B, {run.bytes_a_photo:.1f} B a "
        f"photo; at {AT_SCALE:.0e} photos {run.bytes_a_photo * AT_SCALE / 2**30:.1f} GiB"
    )


def _repaired(run: RepairRun) -> float:
    return float(run.job.repaired) if run.job is not None else math.nan


FIGURES: list[Figure[RepairRun]] = [
    Figure(
        "differences repaired",
        "photos",
        _repaired,
        lambda run: (
            f"{run.changed} of {run.photos:,} photos changed unannounced; "
            f"{run.job.repair_rounds if run.job else 0} round(s); the job ended "
            f"{run.job.state if run.job else '?'}"
        ),
    ),
    Figure(
        "time the repair added",
        "s",
        lambda run: run.added_s,
        lambda run: (
            f"the verification that found them and their replay round; the passing "
            f"verification after it {run.passing_s:.2f} s"
        ),
    ),
    Figure(
        "keys replayed",
        "keys",
        lambda run: float(run.job.replayed) if run.job else math.nan,
        lambda run: "the repaired keys, replayed into the new collection before the switch",
    ),
    Figure(
        "listings in Redis, a photo",
        "B",
        lambda run: run.bytes_a_photo,
        lambda run: (
            f"digests of each listed key and its version; "
            f"{run.bytes_a_photo * AT_SCALE / 2**30:.1f} GiB at 1e8 for the reindex's length"
        ),
    ),
]


def run(args: argparse.Namespace) -> None:
    report(measure(args))


if __name__ == "__main__":
    run(parser().parse_args())
