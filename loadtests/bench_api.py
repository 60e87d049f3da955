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
import json
import os
import random
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiohttp
import numpy as np
import onnxruntime as ort

from core.embedding.arrays import Embeddings
from core.embedding.manifest import TEXT_INPUT, TEXT_MODEL, load_manifest
from core.embedding.tokenizer import ClipTokenizer, pad_batch
from core.settings import Settings
from core.vectorstore import VectorStore
from harness.machine import commit, machine
from harness.models import ensure_model
from harness.processes import (
    api_process,
    free_ports,
    own_redis,
    running,
    triton_ports,
)
from harness.store import ensure_store, store_arguments
from harness.vocabulary import Queries
from loadtests import openloop
from loadtests.openloop import (
    LIMIT,
    OPERATOR_KEY,
    Phase,
    Probe,
    keep_alive,
    one_request,
    search_target,
)
from loadtests.registry import Figure
from model.repository import version_dir
from model.triton_config import parse
from model.triton_server import TritonServer
from query_api.http.auth import hash_key

CACHED_RATE = 100.0  # requests/s of the cached target
CACHED_P99_MS = 10.0
UNCACHED_P99_MS = 100.0
DESIGN_PEAK = 100.0  # requests/s
RATIO_TARGET = 1.2  # uncached p50 / (raw text encoder + raw vector search)
CONNECTIONS = 256  # most requests in flight; more wait for a connection (and that counts)


# -- raw figures: the text encoder and the vector search alone, in this process ---------------


def text_threads(repo: Path) -> int:
    """The intra-op threads Triton's python backend gives clip_text (0: onnxruntime's default)."""
    config = parse((repo / TEXT_MODEL / "config.pbtxt").read_text())
    param = config.parameters.get("intra_op_thread_count")
    return int(param.string_value) if param is not None else 0


def text_queue_delay_ms(repo: Path) -> float:
    config = parse((repo / TEXT_MODEL / "config.pbtxt").read_text())
    return float(config.dynamic_batching.max_queue_delay_microseconds) / 1000


@dataclass
class Raw:
    tokenize_ms: float
    text_ms: float
    search_ms: float = 0.0
    vectors: list[Embeddings] = field(default_factory=list)


def raw_text(
    repo: Path, version: int, timed: list[str], embedded: list[str], pad_multiple: int
) -> Raw:
    """Median tokenize and encode times of single queries (batch 1, padded as the client
    pads), and the embeddings of `embedded` for the raw search."""
    tokenizer = ClipTokenizer.from_repository(repo, version)
    context = load_manifest(repo, version).tokenizer.context_length
    options = ort.SessionOptions()
    options.intra_op_num_threads = text_threads(repo)
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(version_dir(repo, TEXT_MODEL, version) / "model.onnx"),
        options,
        providers=["CPUExecutionProvider"],
    )
    batches = [pad_batch(tokenizer.encode_batch([q]), pad_multiple, context) for q in timed]
    for batch in batches[:5]:  # warm-up
        session.run(None, {TEXT_INPUT: batch})
    tokenize, encode = [], []
    for query, batch in zip(timed, batches, strict=True):
        t0 = time.perf_counter()
        tokenizer.encode_batch([query])
        t1 = time.perf_counter()
        session.run(None, {TEXT_INPUT: batch})
        encode.append(time.perf_counter() - t1)
        tokenize.append(t1 - t0)
    vectors: list[Embeddings] = []
    for start in range(0, len(embedded), 64):
        ids = tokenizer.encode_batch(embedded[start : start + 64])
        out = session.run(None, {TEXT_INPUT: pad_batch(ids, pad_multiple, context)})[0]
        vectors.extend(np.asarray(out, dtype=np.float32))
    return Raw(
        tokenize_ms=float(np.median(tokenize)) * 1000,
        text_ms=float(np.median(encode)) * 1000,
        vectors=vectors,
    )


def raw_search(store: VectorStore, collection: str, vectors: list[Embeddings]) -> float:
    """Median ms of store.search(limit=LIMIT) with query embeddings, after a warm-up."""
    for vector in vectors[:20]:
        store.search(collection, vector, limit=LIMIT)
    times = []
    for vector in vectors:
        t0 = time.perf_counter()
        store.search(collection, vector, limit=LIMIT)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000


# -- the API, driven open loop ------------------------------------------------------------------


async def run_phase(
    http: aiohttp.ClientSession,
    probe: Probe,
    name: str,
    rate: float,
    queries: list[str],
    expect_cached: bool,
) -> Phase:
    """One search per query at `rate`/s (open loop); its row printed."""
    targets = [search_target(q) for q in queries]
    phase = await openloop.run_phase(http, probe, name, rate, targets, expect_cached)
    print(f"  {row(phase)}", flush=True)
    return phase


PHASE_HEADER = (
    "| phase | rate /s | requests | errors | cache flag wrong | achieved /s "
    "| p50 ms | p90 ms | p99 ms | max ms | server p50 ms | send lag p99 ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row(p: Phase) -> str:
    return (
        f"| {p.name} | {p.rate:g} | {len(p.outcomes)} | {p.errors} | {p.wrong_cache} "
        f"| {p.achieved:.1f} | {p.ms(50):.1f} | {p.ms(90):.1f} | {p.ms(99):.1f} | {p.ms(100):.1f} "
        f"| {p.server_p50_ms():.1f} | {p.lag_p99_ms():.1f} |"
    )


# Server-Timing's stages (the API's histograms), then Triton's own view of the embed stage.
_STAGES = ("resolve", "cache", "tokenize", "embed", "search", "other", "total")
BREAKDOWN_HEADER = (
    "| phase | rate /s | "
    + " | ".join(f"API: {s}" for s in _STAGES)
    + " | Triton: request | Triton: queue | Triton: compute | Triton: mean batch |\n"
    + "|---|---:|"
    + "---:|" * (len(_STAGES) + 4)
)


def breakdown_row(p: Phase) -> str:
    b = p.breakdown
    stages = " | ".join(f"{b[f'stage_{s}_ms']:.2f}" for s in _STAGES)
    return (
        f"| {p.name} | {p.rate:g} | {stages} | {b['triton_request_ms']:.1f} "
        f"| {b['triton_queue_ms']:.1f} | {b['triton_infer_ms']:.1f} | {b['batch']:.2f} |"
    )


@dataclass
class LoadResults:
    warmup: Phase
    cached: Phase
    low: Phase
    steps: list[Phase]

    def highest_rate(self) -> float | None:
        """The highest uncached rate held at p99 <= UNCACHED_P99_MS; None when none was."""
        held = [p.rate for p in self.steps if p.holds(UNCACHED_P99_MS)]
        return max(held) if held else None


async def load(
    url: str, metrics: tuple[str, str], args: argparse.Namespace, queries: Queries
) -> LoadResults:
    """`metrics`: the API's and Triton's /metrics URLs."""
    probe = Probe(*metrics)
    # The operator's key: only it is told per answer whether the cache answered.
    async with keep_alive(url, CONNECTIONS, {"X-API-Key": OPERATOR_KEY}) as http:
        print("warm-up: 30 uncached searches at 10/s ...", flush=True)
        warmup = await run_phase(http, probe, "warm-up", 10, queries.take(30), expect_cached=False)

        popular = queries.take(args.cached_queries)
        print(f"pre-warming {len(popular)} cached queries ...", flush=True)
        for query in popular:
            answer = await one_request(
                http, search_target(query), asyncio.get_running_loop().time()
            )
            if answer.status != 200:
                raise RuntimeError(f"pre-warm search failed: {answer.status} {answer.error}")
        r = random.Random(1)
        draws = [r.choice(popular) for _ in range(round(CACHED_RATE * args.seconds))]
        print(f"cached, {CACHED_RATE:g}/s for {args.seconds:g} s ...", flush=True)
        cached = await run_phase(http, probe, "cached", CACHED_RATE, draws, expect_cached=True)

        count = max(1, round(args.low_rate * args.seconds))
        print(f"uncached, {args.low_rate:g}/s for {args.seconds:g} s ...", flush=True)
        low = await run_phase(
            http, probe, "uncached (low)", args.low_rate, queries.take(count), expect_cached=False
        )

        steps: list[Phase] = []
        failed_in_a_row = 0
        for rate in args.rates:
            print(f"uncached, {rate:g}/s for {args.seconds:g} s ...", flush=True)
            queries_now = queries.take(max(1, round(rate * args.seconds)))
            phase = await run_phase(http, probe, "uncached", rate, queries_now, expect_cached=False)
            steps.append(phase)
            failed_in_a_row = 0 if phase.holds(UNCACHED_P99_MS) else failed_in_a_row + 1
            if failed_in_a_row == 2 and not args.all_rates:
                print("  two rates in a row missed the target: stopping the steps", flush=True)
                break
        return LoadResults(warmup, cached, low, steps)


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
    command = shlex.join(["python", "-m", "loadtests.bench_api", *sys.argv[1:]])
    lines = [
        "",
        f"{manifest.arch} ({manifest.weights} weights), {args.photos} photos in Qdrant Edge "
        f"(HNSW m={q.hnsw_m} ef_construct={q.hnsw_ef_construct} ef={q.hnsw_ef} "
        f"oversampling={q.oversampling:g}, "
        f"int8 quantization {'on' if q.quantization else 'off'}), {machine()}, "
        f"onnxruntime {ort.__version__}, commit {commit()}, {datetime.now():%Y-%m-%d %H:%M}",
        f"command: {command}",
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
    data_dir = args.data_dir.resolve()
    prefix = f"bench-api-{os.getpid()}-{int(time.time())}"
    # The API process and this one read the same settings: the environment plus these.
    overrides = {
        "PHOTOSEARCH_DATA_DIR": str(data_dir),
        "PHOTOSEARCH_MODEL__REPOSITORY": str(repo),
        "PHOTOSEARCH_REDIS__PREFIX": prefix,
        "PHOTOSEARCH_API__ANONYMOUS_SEARCH": "true",
        "PHOTOSEARCH_API__KEYS": json.dumps(
            [{"name": "bench", "sha256": hash_key(OPERATOR_KEY), "scopes": ["search", "admin"]}]
        ),
    }
    for name in ("PHOTOSEARCH_QDRANT__URL", "PHOTOSEARCH_QDRANT__PATH"):
        if os.environ.pop(name, None) is not None:
            print(f"note: {name} ignored: this benchmark uses the embedded store in --data-dir")
    os.environ.update(overrides)
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
        triton = stack.enter_context(TritonServer(repo, triton_ports(), work / "triton"))
        port, metrics_port = free_ports(2)
        env = os.environ | {
            "PHOTOSEARCH_REDIS__URL": redis_url,
            "PHOTOSEARCH_TRITON__URL": triton.url,
            "PHOTOSEARCH_API__METRICS_PORT": str(metrics_port),
        }
        print("starting the API ...", flush=True)
        with running(api_process(env, port, work / "api.log", args.api_log_level)):
            metrics = (
                f"http://127.0.0.1:{metrics_port}/metrics",
                f"http://127.0.0.1:{triton.ports.metrics}/metrics",
            )
            results = asyncio.run(load(f"http://127.0.0.1:{port}", metrics, args, queries))
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
