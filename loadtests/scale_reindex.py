"""`python -m loadtests.bench_scale --reindex`: every phase of a reindex at 1e5 and 1e6 photos,
its wall time and the process's peak memory, and their growth per 10x of the catalogue.

For each size: bench_scale's catalogue of small JPEGs, a Redis of its own, and a live
collection as a sync writes it (32-dimension vectors: the old model's). Then a reindex job
into a new collection, its phases run in this process as the indexer's tasks run them
(indexer/tasks.py), one task at a time over the job's work queue: the plan units through
`plan_shard`, `group_shard` and `plan_keys`, each round's step through `units.advance`. The
embedding task writes synthetic 512-dimension vectors (unit vectors around one centre per 100
photos, 1% near-duplicates of a recent photo) instead of reading and embedding: the tiny
model's photos/s is the scale benchmark's end-to-end figure already. No Triton runs.

1. the load: planning every shard of the empty new collection, then writing every batch it
   planned (the embed task's store side: payloads, in-batch groups, upserts);
2. the index build: `finish_bulk_load` (Qdrant Edge's optimize: HNSW) and `index_ready`;
3. the grouping pass: `group_shard` over every shard (--group-shards: a sample of them, the
   rest committed unplanned, and the pass's time extrapolated);
4. catch-up: --changes files put, rewritten or deleted in the catalogue, logged by the live
   side's capture (`ChangeLog.capture_mapped`, as an increment logs them), and the live
   collection changed as the increment would; then the replay round (`start_replay`, its
   units through `plan_keys` and the embed task) and `end_replay`: ms per change;
5. verification: `verify.compare` of the new collection against the live one, --drain more
   changes waiting in the log;
6. the switch: `advance` verifies, takes the live lock and replays the --drain changes, then
   moves the aliases: the job's own `lock_s` (from taking the lock to releasing it).

Memory is the growth of the process's resident set over the phase: the kernel's peak (VmHWM)
reset before it (/proc/self/clear_refs), minus the RSS at its start after a collection and a
malloc_trim; it counts what Qdrant Edge holds natively, which the Python heap does not.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from core.jobstatus import JobPhase, JobState
from harness.processes import (
    free_ports,
    peak_rss_bytes,
    redis_process,
    reset_peak_rss,
    rss_bytes,
    running,
)
from indexer.jobs.catchup import end_replay
from indexer.jobs.units import advance
from indexer.jobs.verify import compare
from indexer.runtime import Runtime
from loadtests.jobtasks import Clustered, Worker, begin_reindex
from loadtests.livechanges import LIVE_DIM, Changes, fill_live
from loadtests.registry import Figure
from loadtests.scale_catalogue import MB, catalogues, runtime
from loadtests.scale_catalogue import parser as scale_parser

PER_CLUSTER = 100  # photos per cluster centre of the synthetic vectors
PHASES = (
    "load: planning",
    "load: writing points",
    "index build",
    "grouping pass",
    "catch-up replay",
    "verification",
    "switch: live lock",
)


@dataclass
class Phase:
    seconds: float  # wall time
    cpu_s: float  # this process's CPU time, every thread: less moved by a busy machine
    rss_mb: float  # peak growth of the resident set over the phase
    count: int  # what it went through: photos, changes
    unit: str
    note: str = ""
    busy: dict[str, float] = field(default_factory=dict)  # seconds in the tasks' calls


@dataclass
class SizeRun:
    photos: int
    shards: int
    phases: dict[str, Phase] = field(default_factory=dict)
    capture_ms: float = 0.0  # the live side's capture, per change
    problems: int = 0  # verification's, expected none
    regrouped: int = 0


# -- memory -----------------------------------------------------------------------------------


_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL("libc.so.6")
except OSError:
    _libc = None


@contextmanager
def peak_rss() -> Iterator[Callable[[], float]]:
    """Yields a function: the resident set's peak growth (MB) since the start, from the
    kernel's high-water mark reset here (Edge's calls hold the GIL: no thread could sample)."""
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)  # what earlier phases freed is given back, so reuse counts
    reset_peak_rss(os.getpid())
    before = rss_bytes(os.getpid())
    yield lambda: max(0.0, (peak_rss_bytes(os.getpid()) - before) / MB)


# -- the phases -----------------------------------------------------------------------------------


class Recorder:
    """Each phase's time and peak RSS growth, printed as it ends."""

    def __init__(self, run: SizeRun, worker: Worker) -> None:
        self.run, self.worker = run, worker

    @contextmanager
    def phase(self, name: str, count: int, unit: str) -> Iterator[Phase]:
        print(f"  {self.run.photos}: {name} ...", flush=True)
        figures = Phase(0.0, 0.0, 0.0, count, unit)
        busy = dict(self.worker.busy)
        with peak_rss() as growth:
            cpu, started = cpu_s(), time.perf_counter()
            yield figures
            figures.seconds = time.perf_counter() - started
            figures.cpu_s = cpu_s() - cpu
            figures.rss_mb = growth()
        figures.busy = {k: v - busy.get(k, 0.0) for k, v in self.worker.busy.items()}
        figures.busy = {k: v for k, v in figures.busy.items() if v > 0}
        self.run.phases[name] = figures
        print(
            f"  {self.run.photos}: {name}: {figures.seconds:.2f} s, CPU {figures.cpu_s:.2f} s, "
            f"+{figures.rss_mb:.0f} MB",
            flush=True,
        )


def cpu_s() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def reindex_run(rt: Runtime, root: Path, photos: int, args: argparse.Namespace) -> SizeRun:
    print(f"  {photos}: the live collection ...", flush=True)
    started = time.perf_counter()
    live, shards = fill_live(rt, root, args.shard_size)
    print(f"  {photos}: live collection in {time.perf_counter() - started:.0f} s", flush=True)
    run = SizeRun(photos, len(shards))
    old_model = Clustered(LIVE_DIM, 64, seed=3)
    worker = Worker(rt, Clustered(args.dim, max(1, photos // PER_CLUSTER)), args.group_shards)
    record = Recorder(run, worker)
    job_id, new = begin_reindex(rt, root, args.dim)

    with record.phase("load: planning", photos, "photos"):
        worker.round(job_id, plan_only=True)
    with record.phase("load: writing points", photos, "photos"):
        worker.round(job_id)
    if args.load_only_above and photos > args.load_only_above:
        return run
    with record.phase("index build", photos, "photos"):
        advance(rt, job_id)  # finish_bulk_load, index_ready, and the grouping round opened
    assert phase_of(rt, job_id) == JobPhase.GROUPING, rt.jobs.get(job_id)
    with record.phase("grouping pass", photos, "photos"):
        worker.round(job_id)
    if worker.sampled_out:  # the shards grouped, extrapolated to every shard
        grouping = run.phases["grouping pass"]
        share = grouping.busy["group_shard"] * len(shards) / worker.grouped / grouping.seconds
        grouping.seconds, grouping.cpu_s = grouping.seconds * share, grouping.cpu_s * share
        grouping.note = f"{worker.grouped} of {len(shards)} shards grouped, time extrapolated"
    run.regrouped = job_field(rt, job_id, "regrouped")

    changes = Changes(root, photos)
    keys = changes.make(args.changes)
    captured = changes.live_side(rt, live, keys, old_model)
    with record.phase("catch-up replay", len(keys), "changes"):
        advance(rt, job_id)  # start_replay of what the live side logged
        assert phase_of(rt, job_id) == JobPhase.CATCH_UP, rt.jobs.get(job_id)
        worker.round(job_id)
        job = rt.jobs.get(job_id)
        assert job is not None
        end_replay(rt.records, job_id, new, job.capture_cut)

    drain = changes.make(args.drain)
    captured += changes.live_side(rt, live, drain, old_model)
    run.capture_ms = 1000 * captured / (len(keys) + len(drain))
    with record.phase("verification", photos, "photos"):
        problems = compare(
            rt.store,
            rt.source(str(root)),
            live,
            new,
            pending=rt.capture.pending(new),
            skipped=lambda keys: rt.skips.get(new, keys),
            listed=lambda keys: rt.records.listings.lookup(job_id, keys),
            replayed=lambda keys: rt.records.listings.replayed(job_id, keys),
            samples=rt.settings.indexer.verify_samples,
        ).problems
    run.problems = len(problems)
    for problem in problems[:10]:
        print(f"  {photos}: verification: {problem}", flush=True)

    with record.phase("switch: live lock", len(drain), "changes"):
        advance(rt, job_id)  # verifies again, takes the live lock, opens the drain's round
        assert phase_of(rt, job_id) == JobPhase.SWITCH, rt.jobs.get(job_id)
        worker.round(job_id)
        advance(rt, job_id)  # end_replay, the delete guard's check, the aliases
    job = rt.jobs.get(job_id)
    assert job is not None and job.state == JobState.DONE, job
    print(f"  {photos}: the live lock held {job.lock_s:.3f} s", flush=True)
    # The job's own figure, from taking the lock to releasing it; the memory is the whole
    # step's, the verification before the lock included.
    run.phases["switch: live lock"].seconds = job.lock_s
    return run


def phase_of(rt: Runtime, job_id: str) -> str:
    job = rt.jobs.get(job_id)
    return "" if job is None else job.phase


def job_field(rt: Runtime, job_id: str, name: str) -> int:
    job = rt.jobs.get(job_id)
    return 0 if job is None else int(getattr(job, name))


# -- the sizes, and the table ---------------------------------------------------------------------


def measure_reindex(args: argparse.Namespace) -> list[SizeRun]:
    runs: list[SizeRun] = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        redis, redis_url = redis_process(work)
        (unused,) = free_ports(1)  # nothing asks Triton: an address where none answers
        with running(redis):
            for photos, root in catalogues(work, args.sizes):
                triton = f"127.0.0.1:{unused}"
                with runtime(work / "data", triton, work / "models", redis_url, args) as rt:
                    runs.append(reindex_run(rt, root, photos, args))
    return runs


def per_10x(small: float, large: float, photos: tuple[int, int]) -> float | None:
    """A figure's growth per 10x of the catalogue: (large / small) ^ (1 / log10(N ratio))."""
    if small <= 0 or large <= 0 or photos[1] <= photos[0]:
        return None
    return float((large / small) ** (1 / math.log10(photos[1] / photos[0])))


def cost(phase: Phase) -> str:
    if phase.unit == "changes":
        return f"{1000 * phase.seconds / phase.count:.2f} ms/change"
    return f"{1e6 * phase.seconds / phase.count:.1f} µs/photo"


def table(runs: list[SizeRun]) -> str:
    """One markdown table: each phase's wall and CPU time, wall time per unit of its work and
    peak RSS growth at each size; and their growth per 10x, smallest size to largest."""
    head = ["phase"]
    for run in runs:
        head += [f"{run.photos:,}: {what}" for what in ("wall s", "CPU s", "cost", "RSS MB")]
    if len(runs) > 1:
        head += ["wall per 10x", "CPU per 10x", "RSS per 10x"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    sizes = (runs[0].photos, runs[-1].photos)
    for name in PHASES:
        cells = [name]
        for run in runs:
            p = run.phases.get(name)
            if p is None:  # not measured at this size (--load-only-above)
                cells += ["-"] * 4
            else:
                cells += [f"{p.seconds:.2f}", f"{p.cpu_s:.2f}", cost(p), f"{p.rss_mb:.0f}"]
        if len(runs) > 1:
            small, large = runs[0].phases.get(name), runs[-1].phases.get(name)
            for figure in ("seconds", "cpu_s", "rss_mb"):
                ratio = None
                if small is not None and large is not None:
                    ratio = per_10x(getattr(small, figure), getattr(large, figure), sizes)
                cells.append("-" if ratio is None else f"{ratio:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(runs: list[SizeRun]) -> None:
    print("\n" + table(runs))
    for run in runs:
        notes = [f"{name}: {p.note}" for name, p in run.phases.items() if p.note]
        notes += [
            f"{name}: " + ", ".join(f"{call} {s:.2f} s" for call, s in p.busy.items())
            for name, p in run.phases.items()
            if name in ("catch-up replay", "switch: live lock") and p.busy
        ]
        if "catch-up replay" not in run.phases:
            print(f"\n{run.photos} photos in {run.shards} shards: the load alone")
            continue
        print(
            f"\n{run.photos} photos in {run.shards} shards: the live side's capture "
            f"{run.capture_ms:.3f} ms/change; grouping moved {run.regrouped} photos; "
            f"verification found {run.problems} problems" + "".join(f"; {n}" for n in notes)
        )
    if len(runs) > 1 and not math.isnan(ratio := catch_up_ratio(runs)):
        print(f"catch-up per change, largest / smallest catalogue: {ratio:.2f}x (goal <= 1.2)")


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def parser() -> argparse.ArgumentParser:
    p = scale_parser()
    p.set_defaults(reindex=True)
    return p


measure = measure_reindex


def phase_row(name: str) -> Figure[list[SizeRun]]:
    def value(runs: list[SizeRun]) -> float:
        return runs[-1].phases[name].seconds if name in runs[-1].phases else math.nan

    def context(runs: list[SizeRun]) -> str:
        def at(run: SizeRun) -> str:
            p = run.phases.get(name)
            if p is None:
                return f"{run.photos:,} photos: not measured"
            figures = f"{p.seconds:.2f} s, CPU {p.cpu_s:.2f} s, RSS {p.rss_mb:,.0f} MB"
            return f"{run.photos:,} photos: {figures}"

        small, large = runs[0].phases.get(name), runs[-1].phases.get(name)
        sizes = (runs[0].photos, runs[-1].photos)
        ratio = per_10x(small.cpu_s, large.cpu_s, sizes) if small and large else None
        grows = f"; CPU per 10x {ratio:.2f}x" if ratio is not None else ""
        return f"{at(runs[-1])}; {at(runs[0])}{grows}"

    return Figure(f"reindex: {name}, larger catalogue", "s", value, context)


def catch_up_ratio(runs: list[SizeRun]) -> float:
    small, large = (r.phases.get("catch-up replay") for r in (runs[0], runs[-1]))
    if small is None or large is None:
        return math.nan
    return (large.seconds / large.count) / (small.seconds / small.count)


FIGURES: list[Figure[list[SizeRun]]] = [
    *(phase_row(name) for name in PHASES),
    Figure(
        "catch-up per change, larger / smaller catalogue",
        "x",
        catch_up_ratio,
        lambda runs: f"asked: within 1.2x; {runs[0].photos:,} and {runs[-1].photos:,} photos",
    ),
]


def run(args: argparse.Namespace) -> None:
    report(measure_reindex(args))


if __name__ == "__main__":
    run(parser().parse_args())  # the same as `python -m loadtests.bench_scale --reindex`
