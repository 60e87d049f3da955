"""Run the benchmarks and print one Markdown table of their headline figures.

    python -m loadtests.benchmarks [--only decode,model,indexer,api,recall,scale] [--quick]
                                   [--write docs/benchmarks.md]

Each benchmark is a loadtests/bench_*.py module, run through its measure() with its own
defaults (--quick: short durations and small sizes, for a first look and the tests; not figures
to publish). model, indexer, api and recall share one model repository (var/benchmarks/models:
exported once, then kept), api and recall one store (var/benchmarks/api). Progress goes to
stderr, the table to stdout; --write (re)writes a page with the date, the machine, the commit and
the command beside it. No thresholds: the last column says what the design asked, where it asked
something.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from core.embedding.manifest import list_versions
from harness.machine import ROOT, Occasion
from harness.models import ensure_model
from loadtests import bench_api, bench_decode, bench_indexer, bench_model, bench_recall, bench_scale

F = TypeVar("F")

WORK = ROOT / "var" / "benchmarks"
HEADER = (
    "| benchmark | figure | value | unit | what the issue asked / context |\n|---|---|---:|---|---|"
)


@dataclass(frozen=True)
class Row:
    benchmark: str
    figure: str
    value: float
    unit: str
    context: str

    def markdown(self) -> str:
        return (
            f"| {self.benchmark} | {self.figure} | {number(self.value)} | {self.unit} "
            f"| {self.context} |"
        )


def number(value: float) -> str:
    """Three significant digits or so, never in exponent form: the table is read by people."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(r.markdown() for r in rows)])


# ---------------------------------------------------------------------------------------------
# What each benchmark adds to the table: its rows, read from the figures its measure() returns,
# and the docs page's paragraph about them.


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
            f"{', '.join(map(str, f.raw))}, best of {bench_model.REPEATS}"
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


def api_own_ms(breakdown: dict[str, float]) -> float:
    """What the API adds to Triton (its queue included) and the store: resolving the live
    collection, the cache, tokenizing, routing, validation and serialization."""
    b = breakdown
    return b["stage_total_ms"] - b["stage_embed_ms"] - b["stage_search_ms"]


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
        f"highest uncached rate at p99 <= {bench_api.UNCACHED_P99_MS:g} ms",
        "req/s",
        lambda f: f.results.highest_rate() or 0.0,
        rate_context,
    ),
]


def at_shipped(f: bench_recall.RecallFigures, kind: str = "text") -> bench_recall.Measured:
    """Qdrant Edge at the search settings the code ships (hnsw_ef, oversampling)."""
    return f.edge(kind).at(f.shipped)


def fastest_context(f: bench_recall.RecallFigures) -> str:
    fastest = f.edge().fastest()
    there = (
        f"{bench_recall.label(fastest.tuning)}, {fastest.p50_ms:.2f} ms p50"
        if fastest
        else "none in the grid"
    )
    return (
        f"Qdrant Edge in-process, limit {bench_recall.K}, text queries; exact search "
        f"{f.edge().exact.p50_ms:.1f} ms; fastest at >= {bench_recall.TARGET:.0%}: {there}"
    )


RECALL: list[Figure[bench_recall.RecallFigures]] = [
    Figure(
        "recall@10 at the shipped search settings",
        "%",
        lambda f: at_shipped(f).recall * 100,
        lambda f: (
            f"asked: >= {bench_recall.TARGET:.0%} against exact search; hnsw_ef "
            f"{f.shipped.hnsw_ef}, oversampling {f.shipped.oversampling:g}; {f.queries} text "
            f"queries (best hits {f.edge().top1:.2f}, as CLIP's); photo queries "
            f"{at_shipped(f, 'photo').recall:.1%}"
        ),
    ),
    Figure(
        "vector search at the shipped search settings, p50",
        "ms",
        lambda f: at_shipped(f).p50_ms,
        fastest_context,
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
    Benchmark(
        "recall",
        bench_recall.parser,
        bench_recall.measure,
        RECALL,
        "The vector search's recall@10 against exact search on the api benchmark's store "
        "(reused), at every hnsw_ef x oversampling (int8 rescored) and with the int8 copies "
        "ignored; the rows are the shipped settings'. Text queries sit as far from the photos "
        "as CLIP's text embeddings do; photo queries are new points drawn like the stored ones. "
        "No Qdrant server runs here: it is sent the same parameters, unmeasured (--qdrant-url "
        "measures one).",
        quick="--photos 2000 --clusters 20 --queries 50 --ef 32,128 --oversampling 1,2".split(),
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


# ---------------------------------------------------------------------------------------------
# Running them.


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shown(arg: str) -> str:
    """An argument as a reader reruns it, from the repository's root: paths inside it relative."""
    path = Path(arg)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else arg


def shared_model(repository: Path, arch: str) -> Path:
    """The repository model, indexer and api share: exported (random weights) on first use."""
    if repository == WORK / "models" and repository.is_dir() and not list_versions(repository):
        shutil.rmtree(repository)  # our own export, interrupted: ensure_model refuses the rest
    with contextlib.redirect_stdout(sys.stderr):
        ensure_model(repository, arch)
    return repository


@contextlib.contextmanager
def own_environment() -> Iterator[None]:
    """bench_api points PHOTOSEARCH_* at its own store for its API process: undo that after, so
    each benchmark gets the environment this command was given."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def arguments(bench: Benchmark[Any], quick: bool, arch: str, model: Path | None) -> list[str]:
    argv = list(bench.quick) if quick else []
    if model is not None:
        argv += ["--arch", arch, "--repository", str(model)]
    # A store per size: a --quick run must not rebuild the 1e5 one; recall reads api's store.
    if bench.name in ("api", "recall"):
        argv += ["--data-dir", str(WORK / ("api-quick" if quick else "api"))]
    return argv


def run(
    names: Sequence[str], quick: bool, arch: str, repository: Path
) -> tuple[list[Row], dict[str, str]]:
    """The rows of the named benchmarks, and the command that reruns each one alone."""
    rows: list[Row] = []
    commands: dict[str, str] = {}
    model: Path | None = None
    for bench in (b for b in BENCHMARKS if b.name in names):
        if bench.uses_model and model is None:
            progress(f"== the shared model: {shown(str(repository))}")
            model = shared_model(repository, arch)
        argv = arguments(bench, quick, arch, model if bench.uses_model else None)
        alone = ["python", "-m", bench.measure.__module__, *map(shown, argv)]
        commands[bench.name] = shlex.join(alone)
        progress(f"== {bench.name}: {commands[bench.name]}")
        args = bench.parser().parse_args(argv)
        started = time.monotonic()
        # The modules print their progress on stdout: here stdout is for the table alone.
        with own_environment(), contextlib.redirect_stdout(sys.stderr):
            figures = bench.measure(args)
        progress(f"== {bench.name}: {time.monotonic() - started:.0f} s")
        rows += [
            Row(bench.name, f.name, f.value(figures), f.unit, f.context(figures))
            for f in bench.figures
        ]
    return rows, commands


# ---------------------------------------------------------------------------------------------
# The page: the table with what a reader needs to trust or redo it.


def page(rows: Sequence[Row], commands: dict[str, str], at: Occasion, took_s: float) -> str:
    about = [
        f"- **{name}**: {BY_NAME[name].about} Alone, with all its tables: `{commands[name]}`"
        for name in commands
    ]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "<!-- Written by `python -m loadtests.benchmarks --write docs/benchmarks.md`: rerun",
            "it rather than edit this page; tests/system/test_benchmarks.py checks that it has",
            "a row for every figure the command prints. -->",
            "",
            f"- date: {at.started:%Y-%m-%d %H:%M} UTC (took {took_s / 60:.1f} min)",
            f"- machine: {at.machine}",
            f"- load average at the start: {at.load:.2f} (other work on the machine skews every "
            "figure: compare runs of one machine, quiet)",
            f"- commit: {at.commit}",
            f"- command: `{at.command}`",
            "",
            "## Figures",
            "",
            table(rows),
            "",
            "## What the rows are",
            "",
            "The model is ViT-B-32 with random weights (its speed does not depend on them), "
            "exported for Triton's CPU target (onnxruntime in the python backend), Triton and "
            "the rest on the same cores. Rates are the best of repetitions where a benchmark "
            "repeats; latencies are percentiles of one run.",
            "",
            *about,
            "",
            "## Rerun",
            "",
            "```sh",
            "python -m loadtests.benchmarks --write docs/benchmarks.md  # this page",
            "make bench ARGS='--write docs/benchmarks.md'               # the same",
            "python -m loadtests.benchmarks --only api,scale            # a subset, printed only",
            "python -m loadtests.benchmarks --quick                     # a first look: minutes",
            "```",
            "",
            "The first run exports the model into var/benchmarks/models and builds the API's "
            "100,000-vector store in var/benchmarks/api; later runs reuse both. Run it on a "
            "quiet machine: the figures are for comparing runs, not thresholds.",
            "",
        ]
    )


def names(text: str) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BY_NAME]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(BY_NAME)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        type=names,
        default=list(BY_NAME),
        metavar="NAME[,NAME]",
        help=f"run these only, of {','.join(BY_NAME)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="short and small: a first look")
    parser.add_argument("--write", type=Path, metavar="PATH", help="(re)write this page too")
    parser.add_argument("--arch", default="ViT-B-32", help="exported when the repository is empty")
    parser.add_argument(
        "--repository",
        type=Path,
        default=WORK / "models",
        help="the model repository the benchmarks share (default: var/benchmarks/models)",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    at = Occasion.now(shlex.join(["python", "-m", "loadtests.benchmarks", *given]))
    clock = time.monotonic()
    rows, commands = run(args.only, args.quick, args.arch, args.repository.resolve())
    print(table(rows), flush=True)
    if args.write is not None:
        text = page(rows, commands, at, time.monotonic() - clock)
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
        progress(f"wrote {args.write}")


if __name__ == "__main__":
    main()
