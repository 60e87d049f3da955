"""What each benchmark adds to `python -m loadtests.benchmarks`'s table: its rows, read from the
figures its measure() returns, and the docs page's paragraph about them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loadtests import bench_api, bench_decode, bench_diff, bench_indexer, bench_model

F = TypeVar("F")


@dataclass(frozen=True)
class Figure(Generic[F]):
    """One row of the table: a name that never changes (the docs test keys on it), its value
    and its context, both read from a benchmark's figures."""

    name: str
    unit: str
    value: Callable[[F], float]
    context: Callable[[F], str]


@dataclass(frozen=True)
class Benchmark(Generic[F]):
    """One bench_*.py module: its CLI's parser (the defaults live there), measure(), its rows."""

    name: str
    parser: Callable[[], argparse.ArgumentParser]
    measure: Callable[[argparse.Namespace], F]
    figures: Sequence[Figure[F]]
    about: str  # the docs page's explanation of the rows
    quick: Sequence[str] = ()  # its arguments under --quick
    uses_model: bool = False  # takes --arch and --repository: the shared export


# ---------------------------------------------------------------------------------------------
# The benchmarks and the rows each gives. A figure's name is fixed; what varies with the run
# (sizes, rates tried) goes in its context.


def diff_context(f: bench_diff.DiffFigures) -> str:
    s = f.seconds
    scaled = "" if f.photos == 100_000 else f", scaled from {f.photos} photos"
    return (
        f"listing {s['list']:.2f} + indexed versions {s['versions']:.2f} + comparison "
        f"{s['compare']:.2f} s, {f.changed} changed, best of {bench_diff.REPEATS}{scaled}; "
        "a 1e8 catalogue lists 1000x as much"
    )


def per_core(label: str) -> Figure[bench_decode.DecodeFigures]:
    def row(f: bench_decode.DecodeFigures) -> bench_decode.DecodeRow:
        return next(r for r in f.rows if r.label == label)

    return Figure(
        f"decode + preprocess, {label} JPEG",
        "photos/s per core",
        lambda f: row(f).one_core,
        lambda f: (
            f"{row(f).ms_per_photo:.1f} ms a photo ({row(f).megabytes:.2f} MB); "
            f"{row(f).all_cores:.0f}/s on all {f.cores} cores"
        ),
    )


def text_ms(figures: dict[str, float]) -> float:
    """ms per query of one query at a time, padded to its own length."""
    return 1000 / figures["text b1 longest"]


MODEL: list[Figure[bench_model.ModelFigures]] = [
    Figure(
        "text encoder, 1 query padded to 77 tokens",
        "q/s",
        lambda f: f.raw["text b1 77"],
        lambda f: "raw onnxruntime, 16 typical stock-photo queries in turn",
    ),
    Figure(
        "text encoder, 1 query at its own length",
        "q/s",
        lambda f: f.raw["text b1 longest"],
        lambda f: "the same queries, not padded (the export takes any length <= 77)",
    ),
    Figure(
        "dynamic length / 77 tokens, 1 query",
        "x",
        lambda f: f.raw["text b1 longest"] / f.raw["text b1 77"],
        lambda f: "asked: own length vs 77 tokens; same embeddings (CLIP's text tower is causal)",
    ),
    Figure(
        "dynamic length / 77 tokens, batches of 8",
        "x",
        lambda f: f.raw["text b8 longest"] / f.raw["text b8 77"],
        lambda f: (
            f"{f.raw['text b8 longest']:.0f} vs {f.raw['text b8 77']:.0f} q/s; "
            "a batch is padded to its longest query"
        ),
    ),
    Figure(
        "text, 1 query, raw onnxruntime",
        "ms/query",
        lambda f: text_ms(f.raw),
        lambda f: "in this process, at its own length",
    ),
    Figure(
        "text, 1 query, through Triton",
        "ms/query",
        lambda f: text_ms(f.no_delay),
        lambda f: "Triton's python backend on the CPU, queue delays 0, gRPC from this process",
    ),
    Figure(
        "Triton overhead, text, 1 query",
        "x",
        lambda f: text_ms(f.no_delay) / text_ms(f.raw),
        lambda f: (
            "asked: Triton's overhead (time through Triton / raw onnxruntime); "
            f"{text_ms(f.no_delay) - text_ms(f.raw):+.1f} ms a query"
        ),
    ),
    Figure(
        "Triton overhead, image batch of 32",
        "x",
        lambda f: f.raw["image b32"] / f.no_delay["image b32"],
        lambda f: (
            f"time through Triton / raw: {f.raw['image b32']:.1f} img/s raw, "
            f"{f.no_delay['image b32']:.1f} through Triton"
        ),
    ),
    Figure(
        "text, 8 concurrent single queries through Triton",
        "q/s",
        lambda f: f.via["text c8 longest"],
        lambda f: (
            "with the exported 5 ms text queue delay: Triton's dynamic batcher forms the "
            f"batches ({f.no_delay['text c8 longest']:.0f} q/s with delay 0)"
        ),
    ),
]

INDEXER: list[Figure[bench_indexer.IndexerFigures]] = [
    Figure(
        "raw image encoder",
        "img/s",
        lambda f: f.raw[f.best_batch],
        lambda f: (
            f"onnxruntime on all cores, best batch ({f.best_batch}) of "
            f"{', '.join(map(str, f.raw))}, best of {bench_indexer.REPEATS}"
        ),
    ),
    Figure(
        "indexing end to end",
        "img/s",
        lambda f: f.e2e,
        lambda f: (
            f"{f.count} JPEGs of 1.2 MP: read + decode, Triton, Qdrant Edge upserts by a real "
            f"worker, tasks of {f.batch_size}, best of {f.runs}"
        ),
    ),
    Figure(
        "end to end / raw encoder",
        "%",
        lambda f: f.ratio * 100,
        lambda f: "asked: indexing's images/s against the raw encoder's",
    ),
]


def rate_context(f: bench_api.ApiFigures) -> str:
    steps = f.results.steps
    tried = ", ".join(f"{p.rate:g}" for p in steps)
    best = f.results.highest_rate()
    held = next((p for p in steps if p.rate == best), None)
    there = f"p99 {held.ms(99):.1f} ms there; " if held else "none held; "
    return (
        f"asked: {bench_api.DESIGN_PEAK:g}/s (the design's peak), Triton on the same cores; "
        f"{there}tried {tried}/s"
    )


API: list[Figure[bench_api.ApiFigures]] = [
    Figure(
        "cached search p50",
        "ms",
        lambda f: f.results.cached.ms(50),
        lambda f: f"at {bench_api.CACHED_RATE:g}/s, the query embedding in Redis, open loop",
    ),
    Figure(
        "cached search p99",
        "ms",
        lambda f: f.results.cached.ms(99),
        lambda f: (
            f"asked: <= {bench_api.CACHED_P99_MS:g} ms at {bench_api.CACHED_RATE:g}/s; "
            f"{f.results.cached.errors} errors"
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
            f"asked: <= {bench_api.RATIO_TARGET:g}x; raw text {f.raw.text_ms:.1f} + raw search "
            f"{f.raw.search_ms:.2f} ms"
        ),
    ),
    Figure(
        f"highest uncached rate at p99 <= {bench_api.UNCACHED_P99_MS:g} ms",
        "req/s",
        lambda f: f.results.highest_rate() or 0.0,
        rate_context,
    ),
]

BENCHMARKS: list[Benchmark[Any]] = [
    # Cheapest first, and the two that fork worker processes before anything starts threads.
    Benchmark(
        "diff",
        bench_diff.parser,
        bench_diff.measure,
        [
            Figure(
                "nightly diff of 1e5 photos, 1% changed",
                "s",
                lambda f: f.seconds["total"] * 100_000 / f.photos,
                diff_context,
            )
        ],
        "The nightly sync's plan: list a folder of 100,000 photos, read the versions indexed in "
        "Qdrant Edge and compare, with 1% of the photos changed. The figure is the sum of the "
        "three steps, best of 3; the capacity plan scales it to the 1e8 catalogue.",
        quick=["--photos", "5000"],
    ),
    Benchmark(
        "decode",
        bench_decode.parser,
        bench_decode.measure,
        [per_core(label) for label in bench_decode.SIZES],
        "The worker's CPU side of indexing: read, decode and preprocess one JPEG to CLIP's "
        "224x224 input, on one core (the context adds every core, one process each). On GPU "
        "nodes this, not the encoder, sizes the worker fleet.",
        quick=["--count", "2", "--seconds", "0.5"],
    ),
    Benchmark(
        "model",
        bench_model.parser,
        bench_model.measure,
        MODEL,
        "The model path alone. Text: single queries padded to 77 tokens against padded to "
        "their own length (what the client sends), in onnxruntime in this process; then the "
        "same through Triton with queue delays 0, whose ratio to raw is Triton's overhead "
        "(gRPC, the python backend); then 8 concurrent callers with the exported 5 ms queue "
        "delay. Each figure is the best of 3 repetitions.",
        quick=["--seconds", "0.2"],
        uses_model=True,
    ),
    Benchmark(
        "indexer",
        bench_indexer.parser,
        bench_indexer.measure,
        INDEXER,
        "Indexing end to end: a real `photosearch worker` process syncs a folder of 1.2 MP "
        "JPEGs (read and decode on threads, Triton's image model, upserts into Qdrant Edge), "
        "against the image encoder alone in onnxruntime at its best batch. Both share the "
        "machine's cores, as a CPU-only worker and Triton would.",
        quick=["--photos", "64", "--runs", "1", "--seconds", "0.5"],
        uses_model=True,
    ),
    Benchmark(
        "api",
        bench_api.parser,
        bench_api.measure,
        API,
        "The query API end to end: `photosearch api serve` in its own process beside Triton, "
        "over 100,000 clustered vectors in Qdrant Edge (built once, kept under var/benchmarks/), "
        "driven open loop (latency counts from each request's scheduled time). Cached: the "
        "query embedding is in Redis; uncached: every query is new, so Triton embeds it. The "
        "rate steps stop after two rates in a row miss p99 <= 100 ms.",
        quick=(
            "--photos 2000 --clusters 20 --seconds 2 --rates 5,10 --cached-queries 20 "
            "--text-runs 10 --search-runs 20"
        ).split(),
        uses_model=True,
    ),
]
BY_NAME = {b.name: b for b in BENCHMARKS}


def figure_names() -> dict[str, list[str]]:
    """Every row the command knows, by benchmark: what the docs page must hold."""
    return {b.name: [f.name for f in b.figures] for b in BENCHMARKS}
