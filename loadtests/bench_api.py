"""Benchmark the query API end to end: cached and uncached text searches at fixed arrival rates.

    python -m loadtests.bench_api [--photos 100000] [--seconds 20] [--rates 5,10,20,...]

What it measures, against the issue's targets (ViT-B-32 with random weights, 100,000 photos in
the embedded Qdrant Edge store, this machine):

- cached searches (the query embedding is in Redis) at 100 requests/s: p99 (target <= 10 ms);
- uncached searches (every query new): p99 at each rate of --rates, and the highest rate held
  at p99 <= 100 ms without errors (the design's peak is 100/s);
- uncached p50 at a low rate (--low-rate, the design's average) against the raw text encoder
  (onnxruntime, batch 1) plus the raw vector search (Edge, in-process): target <= 1.2x.

The real `photosearch api serve` runs in its own process beside a real Triton; this process
only sends requests, OPEN LOOP: each request leaves at its scheduled time whether or not the
earlier ones have answered, and its latency counts from that scheduled time, so queueing shows.
The exported model (--repository) and the built store (--data-dir) are kept between runs;
building 100,000 points with HNSW takes minutes. Prints Markdown tables; no thresholds are
enforced (machines are noisy): the summary only says which targets the figures meet.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import onnxruntime as ort

from core.embedding.manifest import load_manifest
from core.settings import Settings
from harness.machine import commit, machine
from harness.models import ensure_model
from harness.processes import (
    own_redis,
)
from harness.store import ensure_store, store_arguments
from harness.vocabulary import Queries
from loadtests.api_load import (
    BREAKDOWN_HEADER,
    CACHED_RATE,
    PHASE_HEADER,
    UNCACHED_P99_MS,
    LoadResults,
    breakdown_row,
    load,
    row,
)
from loadtests.api_raw import Raw, raw_search, raw_text, text_queue_delay_ms, text_threads
from loadtests.openloop import (
    LIMIT,
)
from loadtests.registry import Figure
from loadtests.startup import api_beside_triton, api_environment, command, embedded_store_only

CACHED_P99_MS = 10.0
DESIGN_PEAK = 100.0  # requests/s
RATIO_TARGET = 1.2  # uncached p50 / (raw text encoder + raw vector search)


# ---------------------------------------------------------------------------------------------


@dataclass
class ApiFigures:
    """What one run measured, with what report() needs to say how it was set up."""

    settings: Settings
    repo: Path
    version: int
    raw: Raw
    results: LoadResults
    load_before: float
    problems: list[str]  # the API log's error lines


def report(args: argparse.Namespace, figures: ApiFigures) -> str:
    settings, repo, raw, results = figures.settings, figures.repo, figures.raw, figures.results
    manifest = load_manifest(repo, figures.version)
    q = settings.qdrant
    threads = text_threads(repo)
    phases = [results.warmup, results.cached, results.low, *results.steps]
    lines = [
        "",
        f"{manifest.arch} ({manifest.weights} weights), {args.photos} photos in Qdrant Edge "
        f"(HNSW m={q.hnsw_m} ef_construct={q.hnsw_ef_construct} ef={q.hnsw_ef} "
        f"oversampling={q.oversampling:g}, "
        f"int8 quantization {'on' if q.quantization else 'off'}), {machine()}, "
        f"onnxruntime {ort.__version__}, commit {commit()}, {datetime.now():%Y-%m-%d %H:%M}",
        f"command: {command('loadtests.bench_api')}",
        f"load average before the run: {figures.load_before:.2f} (other work on the machine skews "
        "every figure)",
        f"Triton text model: queue delay {text_queue_delay_ms(repo):g} ms, onnxruntime threads "
        f"{threads or 'default (all cores)'}; queries padded to a multiple of "
        f"{settings.model.text_pad_multiple} tokens",
        "",
        "| raw, in this process (median) | ms |",
        "|---|---:|",
        f"| tokenize one query (ClipTokenizer), {args.text_runs} queries | {raw.tokenize_ms:.2f} |",
        f"| text encoder (onnxruntime, batch 1), {args.text_runs} queries | {raw.text_ms:.2f} |",
        f"| vector search (Edge, limit {LIMIT}), {args.search_runs} query embeddings "
        f"| {raw.search_ms:.2f} |",
        f"| text encoder + vector search | {raw.text_ms + raw.search_ms:.2f} |",
        "",
        "Through the API (latency from each request's scheduled send time; open loop):",
        "",
        PHASE_HEADER,
        *(row(p) for p in phases),
        "",
        "send lag: how late this process sent a request (it shares the cores with the API and "
        "Triton); it is part of the latency. cache flag wrong: answers whose `cached` was not "
        "the phase's.",
        "",
        "Where the time went (means per search in ms, from the API's and Triton's /metrics; "
        "'server' above is the API's took_ms):",
        "",
        BREAKDOWN_HEADER,
        *(breakdown_row(p) for p in phases),
    ]

    cached = results.cached
    best = results.highest_rate()
    base = raw.text_ms + raw.search_ms
    ratio = results.low.ms(50) / base

    def verdict(ok: bool) -> str:
        return "yes" if ok else "**no**"

    lines += [
        "",
        "| target | measured | met |",
        "|---|---:|:---:|",
        f"| cached p99 <= {CACHED_P99_MS:g} ms at {CACHED_RATE:g}/s "
        f"| {cached.ms(99):.1f} ms ({cached.errors} errors, {cached.wrong_cache} not cached) "
        f"| {verdict(cached.holds(CACHED_P99_MS))} |",
        f"| uncached: highest rate at p99 <= {UNCACHED_P99_MS:g} ms, no errors or cached "
        f"(design peak {DESIGN_PEAK:g}/s; tried {', '.join(f'{p.rate:g}' for p in results.steps)})"
        f" | {f'{best:g}/s' if best is not None else 'none'} "
        f"| {verdict(best is not None and best >= DESIGN_PEAK)} |",
        f"| uncached p50 at {args.low_rate:g}/s <= {RATIO_TARGET:g} x (raw text {raw.text_ms:.1f}"
        f" + raw search {raw.search_ms:.1f} ms) | {results.low.ms(50):.1f} ms = {ratio:.2f}x "
        f"| {verdict(ratio <= RATIO_TARGET)} |",
        "",
        f"uncached p50 / (tokenize + raw text + raw search): "
        f"{results.low.ms(50) / (base + raw.tokenize_ms):.2f}x; the Triton text queue delay "
        f"({text_queue_delay_ms(repo):g} ms) is part of every uncached search at a low rate.",
    ]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    store_arguments(parser)
    parser.add_argument("--rebuild", action="store_true", help="build the store again")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument(
        "--rates",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[5.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 100.0],
        help="uncached rates, requests/s (default: 5,10,20,30,40,60,80,100)",
    )
    parser.add_argument(
        "--all-rates",
        action="store_true",
        help="keep stepping after two rates in a row missed the p99 target",
    )
    parser.add_argument("--low-rate", type=float, default=2.0, help="uncached p50 rate /s")
    parser.add_argument("--cached-queries", type=int, default=200, help="the cached set")
    parser.add_argument("--text-runs", type=int, default=50, help="raw text encoder queries")
    parser.add_argument("--search-runs", type=int, default=200, help="raw search queries")
    parser.add_argument("--redis-url", help="the API's Redis [a Redis of its own, for the run]")
    parser.add_argument(
        "--text-delay-us",
        type=int,
        default=None,
        help="rewrite the repository's text queue delay first [default: keep the exported one]",
    )
    parser.add_argument(
        "--api-log-level", default="info", help="the API's (info, as served: with an access log)"
    )
    return parser


def measure(args: argparse.Namespace) -> ApiFigures:
    repo = args.repository.resolve()
    # The API process and this one read the same settings: the environment plus these.
    prefix = api_environment("api", args.data_dir.resolve())
    os.environ["PHOTOSEARCH_MODEL__REPOSITORY"] = str(repo)
    embedded_store_only("this benchmark uses the embedded store in --data-dir")
    settings = Settings()

    load_before = os.getloadavg()[0]
    version = ensure_model(repo, args.arch)
    if args.text_delay_us is not None:
        from model.repository import write_configs
        from model.triton_config import BatchingOptions

        write_configs(repo, "cpu", BatchingOptions(text_queue_delay_us=args.text_delay_us))
    dim = load_manifest(repo, version).embedding_dim
    queries = Queries(seed=0)  # the same queries every run; the cache prefix is new each run
    store, collection = ensure_store(
        settings, version, dim, args.photos, args.clusters, args.rebuild
    )
    try:
        print("raw text encoder and vector search ...", flush=True)
        raw = raw_text(
            repo,
            version,
            queries.take(args.text_runs),
            queries.take(args.search_runs),
            settings.model.text_pad_multiple,
        )
        raw.search_ms = raw_search(store, collection, raw.vectors)
        raw.vectors = []
    finally:
        store.close()  # the API process owns the store from here on
    print(
        f"  tokenize {raw.tokenize_ms:.2f} ms, text encoder {raw.text_ms:.2f} ms, "
        f"search {raw.search_ms:.2f} ms",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        redis_url = own_redis(stack, work, args.redis_url, prefix)
        with api_beside_triton(repo, work, redis_url, args.api_log_level) as served:
            metrics = (served.metrics, f"http://127.0.0.1:{served.triton.ports.metrics}/metrics")
            results = asyncio.run(load(served.url, metrics, args, queries))
        log = (work / "api.log").read_text(errors="replace").splitlines()
        problems = [line for line in log if "ERROR" in line or "Traceback" in line]
    return ApiFigures(settings, repo, version, raw, results, load_before, problems)


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def rate_context(f: ApiFigures) -> str:
    steps = f.results.steps
    tried = ", ".join(f"{p.rate:g}" for p in steps)
    best = f.results.highest_rate()
    held = next((p for p in steps if p.rate == best), None)
    there = f"p99 {held.ms(99):.1f} ms there; " if held else "none held; "
    return (
        f"asked: {DESIGN_PEAK:g}/s (the design's peak), Triton on the same cores; "
        f"{there}tried {tried}/s"
    )


def api_own_ms(breakdown: dict[str, float]) -> float:
    """What the API adds to Triton (its queue included) and the store: resolving the live
    collection, the cache, tokenizing, routing, validation and serialization."""
    b = breakdown
    return b["stage_total_ms"] - b["stage_embed_ms"] - b["stage_search_ms"]


FIGURES: list[Figure[ApiFigures]] = [
    Figure(
        "cached search p50",
        "ms",
        lambda f: f.results.cached.ms(50),
        lambda f: f"at {CACHED_RATE:g}/s, the query embedding in Redis, open loop",
    ),
    Figure(
        "cached search p99",
        "ms",
        lambda f: f.results.cached.ms(99),
        lambda f: (
            f"asked: <= {CACHED_P99_MS:g} ms at {CACHED_RATE:g}/s; {f.results.cached.errors} errors"
        ),
    ),
    Figure(
        "uncached search p50",
        "ms",
        lambda f: f.results.low.ms(50),
        lambda f: f"every query new, at {f.results.low.rate:g}/s (the design's average: 1.7/s)",
    ),
    Figure(
        "uncached search p99",
        "ms",
        lambda f: f.results.low.ms(99),
        lambda f: f"the same, {f.results.low.errors} errors",
    ),
    Figure(
        "uncached p50 / (raw text encoder + raw vector search)",
        "x",
        lambda f: f.results.low.ms(50) / (f.raw.text_ms + f.raw.search_ms),
        lambda f: (
            f"asked: <= {RATIO_TARGET:g}x; raw text {f.raw.text_ms:.1f} + raw search "
            f"{f.raw.search_ms:.2f} ms"
        ),
    ),
    Figure(
        "the API's own time on an uncached search",
        "ms",
        lambda f: api_own_ms(f.results.low.breakdown),
        lambda f: (
            "asked: <= 3 ms beside Triton and the store; Server-Timing's total less embed "
            f"({f.results.low.breakdown['stage_embed_ms']:.1f} ms) and search "
            f"({f.results.low.breakdown['stage_search_ms']:.2f} ms), means at "
            f"{f.results.low.rate:g}/s"
        ),
    ),
    Figure(
        f"highest uncached rate at p99 <= {UNCACHED_P99_MS:g} ms",
        "req/s",
        lambda f: f.results.highest_rate() or 0.0,
        rate_context,
    ),
]


def main() -> None:
    args = parser().parse_args()
    figures = measure(args)
    if problems := figures.problems:
        print(f"\nthe API logged {len(problems)} errors, the last ones:", *problems[-5:], sep="\n")
    print(report(args, figures))


if __name__ == "__main__":
    main()
