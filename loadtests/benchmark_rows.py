"""What each benchmark adds to `python -m loadtests.benchmarks`'s table: its rows, read from the
figures its measure() returns, and the docs page's paragraph about them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loadtests import bench_api, bench_decode, bench_indexer, bench_model, bench_scale

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


def sizes(f: bench_scale.ScaleFigures) -> str:
    return f"{f.small.photos} and {f.large.photos} photos, shards of {f.shard_size}"


def heap_context(f: bench_scale.ScaleFigures, size: bench_scale.SizeFigures) -> str:
    return (
        f"{size.photos} photos: the worst step of the split ({size.split.peak_mb:.1f} MB), "
        f"a reindex's load ({size.load.peak_mb:.1f}) and a nightly full sync "
        f"({size.nightly.peak_mb:.1f}), shards of {f.shard_size}"
    )


SCALE: list[Figure[bench_scale.ScaleFigures]] = [
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
        lambda f: f"{f.large.photos} keys listed and cut into shards by one planner",
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
BENCHMARKS.append(
    Benchmark(
        "scale",
        bench_scale.parser,
        bench_scale.measure,
        SCALE,
        "The indexer at scale, on synthetic catalogues of 1e5 and 1e6 small JPEGs in folders of "
        "1000: what one planner task holds (Python heap, tracemalloc: the worst shard of a "
        "first sync's split, a reindex's load and a nightly full sync with 1% changed) and how "
        "fast it goes, the reindex verification's heap, and a real worker process indexing "
        "the catalogue through Triton's tiny test model, the embed queue polled every "
        "millisecond.",
        quick=["--sizes", "1500,3000", "--shard-size", "500"],
    )
)
BY_NAME = {b.name: b for b in BENCHMARKS}


def figure_names() -> dict[str, list[str]]:
    """Every row the command knows, by benchmark: what the docs page must hold."""
    return {b.name: [f.name for f in b.figures] for b in BENCHMARKS}
