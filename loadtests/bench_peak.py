"""The query path at the design's peak, under `photosearch up`: where each millisecond goes,
uncached p99 by rate, and what happens past capacity.

    python -m loadtests.bench_peak [--data-dir var/benchmarks/peak] [--rates 50,80,100,120,150]
                                   [--seconds 20] [--precision fp32|int8|fp16]
                                   [--profile-rate 100]

It starts `photosearch up` (a first start exports ViT-B-32 with random weights and indexes the
demo photos plus --variants JPEGs; later runs reuse the data directory), then sends text
searches OPEN LOOP (each leaves at its time whether or not the earlier ones have answered;
latency counts from that time), every query one never sent before, so each is a cache miss
and Triton embeds it:

1. at 2/s (the design's average): each stage's mean, from the API's Server-Timing histograms,
   beside Triton's own queue and compute times;
2. at each of --rates: p50, p99 and errors, and the same breakdown; the capacity is the
   highest rate answered without an error at p99 <= 100 ms;
3. at 2x and 3x that capacity: the goodput (answers/s), the p99 of the answered, the refused
   (503) and how fast they were refused.

Beside them, from the same run: the raw text encoder's rate at batch 1 and 8 (onnxruntime on
the served graph, as one Triton text instance runs it, before any load), so a slower machine
shows as such; the cores each process used in each phase (the API, Triton and its stubs, Redis,
the load generator itself); and py-spy's samples of the API's and a text stub's Python at
--profile-rate.

No thresholds: it prints Markdown tables and says which of the issue's goals they meet.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from core.embedding.manifest import TEXT_MODEL, list_versions, load_manifest
from core.embedding.tokenizer import load_tokenizer, pad_for
from harness import photos as photoset
from harness.machine import ROOT, commit, machine
from harness.processes import free_ports
from harness.vocabulary import Queries
from loadtests import cpushare
from loadtests.encoders import QUERIES, encoder, throughput
from loadtests.openloop import Phase, Probe, keep_alive, run_phase, search_target
from loadtests.run import forget_cached_queries
from loadtests.startup import command
from loadtests.system import Target, start
from model.triton_config import BatchingOptions
from query_api.http.timing import STAGES

P99_MS = 100.0
CONNECTIONS = 512  # refusals come back at once: the generator must not be the bottleneck
PAUSE_S = 2.0
LOW_RATE = 2.0


@dataclass
class Profile:
    """Where the CPU went: cores by process role per phase, py-spy's stacks at one rate."""

    cores: dict[str, dict[str, float]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    api: list[str] = field(default_factory=list)
    text_stub: list[str] = field(default_factory=list)
    rate: float = 0.0


async def phase(
    target: Target,
    name: str,
    rate: float,
    seconds: float,
    queries: Queries,
    profile: Profile,
    sample: bool = False,
) -> Phase:
    probe = Probe(target.metrics_url, target.triton_metrics or "")
    targets = [search_target(queries.next()) for _ in range(max(1, round(rate * seconds)))]
    root = target.up.process.pid if target.up and target.up.process else None
    samplers: list[cpushare.Sampler] = []
    if sample and root is not None:
        out = Path(tempfile.mkdtemp(prefix="peak-profile-"))
        for role in ("API", "Triton stub: text"):
            pids = cpushare.find(root, role)
            if pids:
                samplers.append(cpushare.Sampler(pids[0], seconds, out / f"{len(samplers)}.txt"))
    before = cpushare.CpuTimes.of(root) if root is not None else None
    async with keep_alive(target.url, CONNECTIONS, {"X-API-Key": target.api_key or ""}) as http:
        run = await run_phase(http, probe, name, rate, targets, warm_connections=64, pause_s=0)
    if before is not None and root is not None:
        row = f"{name} {rate:g}/s"
        profile.cores[row] = cpushare.cores_by_role(before, cpushare.CpuTimes.of(root))
        profile.rates[row] = rate
    if samplers:
        stacks = [s.finish() for s in samplers]
        profile.api, profile.text_stub = stacks[0], stacks[1] if len(stacks) > 1 else []
        profile.rate = rate
    print(f"  {name} {rate:g}/s: {rate_row(run)}", flush=True)
    await asyncio.sleep(PAUSE_S)
    return run


def raw_text_rates(repository: Path, seconds: float) -> dict[int, float]:
    """Queries/s of the served text graph at batch 1 and 8, run as one Triton text instance
    runs it (its thread count, no spinning), on queries cut to their longest."""
    version = max(list_versions(repository))
    spec = load_manifest(repository, version).tokenizer
    ids = load_tokenizer(repository, version).encode_batch(QUERIES)
    threads = BatchingOptions().text_ort_threads
    session = encoder(repository, TEXT_MODEL, version, threads, served=True)
    rates = {}
    for batch in (1, 8):
        rows = [pad_for(spec, ids[i : i + batch], 1) for i in range(0, len(ids) - batch + 1, batch)]
        rates[batch] = throughput(
            lambda r: session.run(None, {"input_ids": np.asarray(r)}), rows, batch, seconds
        )
    return rates


BREAKDOWN_HEADER = (
    "| rate /s | "
    + " | ".join(STAGES)
    + " | other | API total | Triton: queue | Triton: compute | Triton: batch | client p50 |\n"
    + "|---:|"
    + "---:|" * (len(STAGES) + 7)
)


def breakdown_row(run: Phase) -> str:
    b = run.breakdown
    cells = [f"{b.get(f'stage_{s}_ms', float('nan')):.2f}" for s in (*STAGES, "other", "total")]
    return (
        f"| {run.rate:g} | "
        + " | ".join(cells)
        + f" | {b['triton_queue_ms']:.2f} | {b['triton_infer_ms']:.2f} | {b['batch']:.2f} "
        f"| {run.ms(50):.1f} |"
    )


RATE_HEADER = (
    "| rate /s | sent | answered | errors | p50 ms | p90 ms | p99 ms | max ms | holds |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def rate_row(run: Phase) -> str:
    return (
        f"| {run.rate:g} | {len(run.outcomes)} | {len(run.of(200))} | {run.errors} "
        f"| {run.ms(50):.1f} | {run.ms(90):.1f} | {run.ms(99):.1f} | {run.ms(100):.1f} "
        f"| {'yes' if run.holds(P99_MS) else 'no'} |"
    )


OVERLOAD_HEADER = (
    "| load | rate /s | answered /s (goodput) | of capacity | answered p99 ms | refused 503 "
    "| refusal p50 ms | refusal p99 ms | other errors | send lag p99 ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def overload_row(run: Phase, capacity: float, seconds: float) -> str:
    refused = run.of(503)
    other = len(run.outcomes) - len(run.of(200)) - len(refused)
    return (
        f"| {run.name} | {run.rate:g} | {run.goodput(seconds):.1f} "
        f"| {run.goodput(seconds) / capacity:.0%} | {run.ms(99, run.of(200)):.1f} "
        f"| {len(refused)} | {run.ms(50, refused):.1f} | {run.ms(99, refused):.1f} | {other} "
        f"| {run.lag_p99_ms():.1f} |"
    )


@dataclass
class PeakFigures:
    low: Phase
    steps: list[Phase]
    capacity: float | None
    overload: list[Phase]
    seconds: float
    profile: Profile
    raw_text: dict[int, float]
    served: str  # the model version up serves, as its manifest says


async def measure_target(
    target: Target, args: argparse.Namespace, raw_text: dict[int, float], served: str
) -> PeakFigures:
    if target.settings is not None:  # a query an earlier run sent must miss the cache too
        print(f"cache emptied: {forget_cached_queries(target.settings)} queries", flush=True)
    queries = Queries(seed=0)
    profile = Profile()
    print(f"uncached, {LOW_RATE:g}/s for {args.seconds:g} s ...", flush=True)
    low = await phase(target, "low", LOW_RATE, args.seconds, queries, profile)
    steps = []
    for rate in args.rates:
        sample = rate == args.profile_rate
        steps.append(await phase(target, "uncached", rate, args.seconds, queries, profile, sample))
    held = [run.rate for run in steps if run.holds(P99_MS)]
    capacity = max(held) if held else None
    overload = []
    if capacity:
        for times in (2, 3):
            name = f"{times}x capacity"
            run = await phase(target, name, capacity * times, args.seconds, queries, profile)
            overload.append(run)
    return PeakFigures(low, steps, capacity, overload, args.seconds, profile, raw_text, served)


def report(figures: PeakFigures, args: argparse.Namespace) -> str:
    lines = [
        "",
        f"# The query path at the peak, under `photosearch up` ({machine()}, commit {commit()})",
        "",
        f"`{command('loadtests.bench_peak')}`: ViT-B-32 (random weights; {figures.served}), "
        f"text searches of queries never sent before, open loop, {args.seconds:g} s per rate.",
        "",
        "The raw text encoder on this machine (onnxruntime, as one Triton text instance runs "
        "it, before the load): "
        + ", ".join(f"batch {b}: {r:.0f} queries/s" for b, r in figures.raw_text.items())
        + ".",
        "",
        "## Where the time goes (means per search, ms)",
        "",
        BREAKDOWN_HEADER,
        *(breakdown_row(run) for run in (figures.low, *figures.steps)),
        "",
        "## Uncached searches by rate",
        "",
        RATE_HEADER,
        *(rate_row(run) for run in (figures.low, *figures.steps)),
        "",
    ]
    if figures.capacity is None:
        lines.append("No rate held p99 <= 100 ms without errors: no overload phases.")
    else:
        lines += [
            f"## Past capacity ({figures.capacity:g}/s: the highest rate held)",
            "",
            OVERLOAD_HEADER,
            *(overload_row(r, figures.capacity, figures.seconds) for r in figures.overload),
        ]
    lines += profile_lines(figures.profile)
    return "\n".join(lines)


def profile_lines(profile: Profile) -> list[str]:
    lines = [
        "",
        f"## Where the CPU goes (cores used over each phase; the machine has {psutil.cpu_count()})",
        "",
        *cpushare.table(profile.cores, psutil.cpu_count() or 1, profile.rates),
    ]
    if profile.api:
        lines += [
            "",
            f"## The API's Python at {profile.rate:g}/s (py-spy, samples of running threads)",
            "",
            "Below which of our functions:",
            "",
            *cpushare.top(cpushare.self_time(profile.api, cpushare.PROJECT), 12),
            "",
            "Innermost function:",
            "",
            *cpushare.top(cpushare.self_time(profile.api), 15),
        ]
    if profile.text_stub:
        lines += [
            "",
            f"## A Triton text stub's Python at {profile.rate:g}/s (py-spy)",
            "",
            *cpushare.top(cpushare.self_time(profile.text_stub), 10),
        ]
    return lines


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "benchmarks" / "peak")
    parser.add_argument(
        "--rates",
        type=lambda s: [float(r) for r in s.split(",")],
        default=[50.0, 80.0, 100.0, 120.0, 150.0],
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="per rate")
    parser.add_argument("--variants", type=int, default=200, help="photos beside the demo's")
    parser.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "fp16", "int8"],
        help="up --precision (default: up's own default)",
    )
    parser.add_argument(
        "--profile-rate", type=float, default=100.0, help="the rate at which py-spy samples"
    )
    return parser


def measure(args: argparse.Namespace) -> PeakFigures:
    photos = args.data_dir / "photos"
    print(f"photos: {len(photoset.prepare(photos, args.variants))} in {photos}", flush=True)
    port, redis_port = free_ports(2)
    target = start(
        args.data_dir,
        photos,
        port,
        redis_port,
        args.data_dir / "up.log",
        extra_args=["--precision", args.precision] if args.precision else [],
    )
    try:
        repository = args.data_dir / "models"
        m = load_manifest(repository, max(list_versions(repository)))
        served = f"version {m.version}, {m.precision}"
        raw = raw_text_rates(repository, seconds=2.0)
        return asyncio.run(measure_target(target, args, raw, served))
    finally:
        target.stop()


def main() -> None:
    args = parser().parse_args()
    print(report(measure(args), args))


if __name__ == "__main__":
    main()
