"""The benchmarks `python -m loadtests.benchmarks` runs: each one's module, how to run it quick
or full, and (kept in the module, beside what it measures) the rows of docs/benchmarks.md it
yields.

A module named here has parser() (its defaults are the full run), measure(args) returning its
figures, and FIGURES: a row each.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

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
class Benchmark:
    name: str
    module: str
    about: str  # the page's paragraph on its rows
    quick: Sequence[str] = ()  # its arguments under --quick: a first look, not figures
    uses_model: bool = False  # takes --arch and --repository: the shared export
    api_store: bool = False  # takes --data-dir: the api benchmark's store, built once

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def figures(self) -> Sequence[Figure[Any]]:
        figures: Sequence[Figure[Any]] = self.load().FIGURES
        return figures


# Cheapest first, and the two that fork worker processes before anything starts threads.
BENCHMARKS = [
    Benchmark(
        "decode",
        "loadtests.bench_decode",
        (
            "The worker's CPU side of indexing: read, decode and preprocess one JPEG to CLIP's "
            "224x224 input, on one core (the context adds every core, one process each). On GPU "
            "nodes this, not the encoder, sizes the worker fleet."
        ),
        ["--count", "2", "--seconds", "0.5"],
    ),
    Benchmark(
        "model",
        "loadtests.bench_model",
        (
            "The model path alone. Text: single queries padded to 77 tokens against padded to "
            "their own length (what the client sends), in onnxruntime in this process; then the "
            "same through Triton with queue delays 0, whose ratio to raw is Triton's overhead "
            "(gRPC, the python backend); then 8 concurrent callers with the exported 5 ms queue "
            "delay. Each figure is the best of 3 repetitions."
        ),
        ["--seconds", "0.2"],
        uses_model=True,
    ),
    Benchmark(
        "indexer",
        "loadtests.bench_indexer",
        (
            "Indexing end to end: a real `photosearch worker` process syncs a folder of 1.2 MP "
            "JPEGs (read and decode on threads, Triton's image model, upserts into Qdrant Edge), "
            "against the image encoder alone in onnxruntime at its best batch. Both share the "
            "machine's cores, as a CPU-only worker and Triton would."
        ),
        ["--photos", "64", "--runs", "1", "--seconds", "0.5"],
        uses_model=True,
    ),
    Benchmark(
        "api",
        "loadtests.bench_api",
        (
            "The query API end to end: `photosearch api serve` in its own process beside Triton, "
            "over 100,000 clustered vectors in Qdrant Edge (built once, kept under "
            "var/benchmarks/), driven open loop (latency counts from each request's scheduled "
            "time). Cached: the query embedding is in Redis; uncached: every query is new, so "
            "Triton embeds it. The rate steps stop after two rates in a row miss p99 <= 100 ms."
        ),
        (
            "--photos 2000 --clusters 20 --seconds 2 --rates 5,10 --cached-queries 20 "
            "--text-runs 10 --search-runs 20"
        ).split(),
        uses_model=True,
        api_store=True,
    ),
    Benchmark(
        "recall",
        "loadtests.bench_recall",
        (
            "The vector search's recall@10 against exact search on the api benchmark's store "
            "(reused), at every hnsw_ef x oversampling (int8 rescored) and with the int8 copies "
            "ignored; the rows are the shipped settings'. Text queries sit as far from the photos "
            "as CLIP's text embeddings do; photo queries are new points drawn like the stored "
            "ones. No Qdrant server runs here: it is sent the same parameters, unmeasured "
            "(--qdrant-url measures one)."
        ),
        "--photos 2000 --clusters 20 --queries 50 --ef 32,128 --oversampling 1,2".split(),
        uses_model=True,
        api_store=True,
    ),
    Benchmark(
        "scale",
        "loadtests.bench_scale",
        (
            "The indexer at scale, on synthetic catalogues of 1e5 and 1e6 small JPEGs in folders "
            "of 1000: what one planner task holds (Python heap, tracemalloc: the worst shard of a "
            "first sync's split, a reindex's load and a nightly full sync with 1% changed) and "
            "how fast it goes, the reindex verification's heap, and a real worker process "
            "indexing the catalogue through Triton's tiny test model, the embed queue polled "
            "every millisecond."
        ),
        ["--sizes", "1500,3000", "--shard-size", "500"],
    ),
    Benchmark(
        "reindex",
        "loadtests.scale_reindex",
        (
            "Every phase of a reindex at two catalogue sizes (bench_scale --reindex): Qdrant Edge "
            "in-process, synthetic clustered 512-d vectors in place of the encoder, shards of "
            "10,000. Each row is a phase's wall time at the larger size; its context the CPU time "
            "(steadier on a busy machine), the peak RSS growth (Edge's native memory included), "
            "the smaller size's and the CPU's growth per 10x of the catalogue."
        ),
        "--sizes 1500,3000 --shard-size 500 --changes 60 --drain 10 --group-shards 4".split(),
    ),
    Benchmark(
        "repair",
        "loadtests.bench_repair",
        (
            "A reindex of 10,000 photos while 1% of them change unannounced (no sync or "
            "increment told: written, overwritten or deleted before the load listed them, and "
            "changed again after it): the differences its verification repairs, the time the "
            "repair adds (the verification that found them and their replay round), the keys "
            "replayed, and the bytes its listings' record takes in Redis a photo. Qdrant Edge "
            "in-process, synthetic 512-d vectors in place of the encoder, shards of 1,000, "
            "every shard's keys compared."
        ),
        "--photos 600 --shard-size 100".split(),
    ),
    Benchmark(
        "redis",
        "loadtests.bench_redis_kills",
        (
            "A sync of 10,000 small JPEGs by a real `photosearch worker` process through "
            "Triton's tiny test model into Qdrant Edge, with the queue's Redis (append-only, "
            "fsynced always, as `up` runs it) SIGKILLed 0, 1 and 5 times at even shares of the "
            "photos and started again at once: the wall time, the photos Triton embedded twice, "
            "and the longest the job's progress stood still after a kill (what a task lost "
            "with the kill waited to be taken up again). The visibility timeout is the "
            "default, 3,600 s; the lease, 10 s, brings the work back."
        ),
        "--photos 300 --kills 0,1".split(),
    ),
    Benchmark(
        "footprint",
        "loadtests.bench_footprint",
        (
            "What a collection holds, part by part, on Qdrant Edge in-process: a collection built "
            "as the indexer builds one (its config, payload indexes, keywords vector and payload, "
            "vectors in clusters) at two sizes; bytes per photo on disk are the slope between "
            "them (what any collection holds drops out), resident bytes those of a fresh process "
            "serving searches (psutil). core/vectorstore/footprint.py's capacity model takes its "
            "constants from these rows."
        ),
        ["--points", "2000,4000"],
    ),
    Benchmark(
        "store",
        "loadtests.bench_store",
        (
            "Each kind of search the vector store serves, in-process (no API, no model): a "
            "collection of clustered unit vectors whose payloads hold titles, tags, a "
            "photographer, a date and near-duplicate groups, searched through the functions "
            "the API calls (the store's methods, query_api's hybrid plan and page arrangement). "
            "The rows are Qdrant Edge's medians; the context adds its p95 and qdrant-client's "
            "local mode."
        ),
        "--photos 1000 --queries 10".split(),
    ),
    # The stock-photo features: what they cost a search, the indexer and a keystroke, and how
    # well the automatic tags do.
    Benchmark(
        "features",
        "loadtests.bench_features",
        (
            "What facets, business boosts and suggestions cost against plain hybrid search: the "
            "real API, Triton and Redis over the api benchmark's store (reused), whose payloads "
            "hold the visual attributes, automatic tags and popularity; every query's embedding "
            "cached, so the phases compare what the features add; open loop at the design's "
            "average and peak. Facets: the six fields a first page asks for, over the default "
            "pool; boosts: recency and popularity at 0.01; suggestions: prefixes of queries three "
            "sessions searched."
        ),
        "--photos 2000 --clusters 20 --seconds 2 --rates 2,5".split(),
        uses_model=True,
        api_store=True,
    ),
    Benchmark(
        "attributes",
        "loadtests.bench_attributes",
        (
            "What the visual attributes (colours, size, orientation) add to the indexer's decode: "
            "synthetic photo-like JPEGs at a camera's and a web page's size, each decoded and "
            "preprocessed to CLIP's input with and without them, in turn; means per photo."
        ),
        "--count 2 --decodes 20".split(),
    ),
    Benchmark(
        "suggest",
        "loadtests.bench_suggest",
        (
            "Suggestions over an index of 50,000 popular queries, 100,000 title words and 20,000 "
            "tags: lookups in the replica's index, and GET /v1/suggest through the real app "
            "over HTTP, one at a time, for every prefix of queries drawn by popularity."
        ),
        "--queries 2000 --terms 4000 --tags 1000 --lookups 500 --requests 200".split(),
    ),
    Benchmark(
        "tagging",
        "loadtests.bench_tagging",
        (
            "Automatic tags: the tiny model trained on synthetic photos, its rule calibrated on "
            "400 of them, applied to 600 held back (shape, colour and texture tags), against its "
            "untrained twin and chance."
        ),
    ),
]
BY_NAME = {b.name: b for b in BENCHMARKS}


def figure_names() -> dict[str, list[str]]:
    """Every row the command knows, by benchmark: what the docs page must hold."""
    return {b.name: [f.name for f in b.figures()] for b in BENCHMARKS}
