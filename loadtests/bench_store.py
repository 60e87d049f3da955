"""Latency of each kind of search the vector store serves, on Qdrant Edge and on qdrant-client's
local mode, in-process (no API, no embedding model).

    python -m loadtests.bench_store [--photos 5000] [--dim 512] [--queries 60]
                                    [--engines edge,local]

Builds one collection of --photos unit vectors in clusters (as real embeddings are: uniformly
random ones are HNSW's worst case), whose payloads hold a title, tags, a photographer, a date
and near-duplicate groups of one to four photos; then times each kind of search through the
functions the API calls: the store's methods, and query_api's hybrid plan and page arrangement
for the hybrid, diverse and collapsed searches (a page of 20 from the API's default pool).
Prints a Markdown table of the median and 95th percentile per kind and engine; no thresholds.

Only public functions are used, so another checkout can be measured with the same script:
`PYTHONPATH=/path/to/other/checkout python /path/to/this/loadtests/bench_store.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from core.keywords import query_vector
from core.payload import PhotoPayload
from core.settings import QdrantSettings, Settings
from core.vectorstore import (
    GROUP_FIELD,
    PhotoPoint,
    SearchFilter,
    VectorStore,
    collection_name,
    open_store,
)
from loadtests.registry import Figure
from query_api.http.timing import Stages
from query_api.schemas.search import Page, TextSearch
from query_api.search.arrange import Fetch, arrange
from query_api.search.hybrid import HybridPlan
from query_api.search.pipeline import nearest_fetch

COLLECTION = collection_name(1, "bench")
LIMIT = 20
WORDS = (
    "harbour crane lighthouse dusk forest trail market stalls tulips desert road snowy peak "
    "rainy window city street night cat sofa dog beach mountain lake bridge river garden "
    "castle train station festival portrait"
).split()
TAGS = ("cat", "dog", "beach", "city", "forest", "flowers", "port", "snow")
PHOTOGRAPHERS = ("ann", "bob", "cy", "dee", "eve")
T = TypeVar("T")


def clustered(n: int, dim: int, rng: np.random.Generator) -> np.ndarray[Any, np.dtype[Any]]:
    """n unit vectors around n/50 centres."""
    centres = rng.normal(size=(max(1, n // 50), dim))
    rows = centres[rng.integers(0, len(centres), size=n)] + 0.35 * rng.normal(size=(n, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    unit: np.ndarray[Any, np.dtype[Any]] = rows.astype(np.float32)
    return unit


def photos(n: int, dim: int, seed: int = 7) -> list[PhotoPoint]:
    rng = np.random.default_rng(seed)
    vectors = clustered(n, dim, rng)
    points = []
    group = ""
    for i in range(n):
        # Every fifth photo starts a burst of near-duplicates of 2 to 4 photos.
        if i % 5 == 0:
            group = f"p{i}"
        vector = vectors[i] if i % 5 == 0 else vectors[i - i % 5] + 0.02 * rng.normal(size=dim)
        vector = (vector / np.linalg.norm(vector)).astype(np.float32)
        title = " ".join(rng.choice(WORDS, size=3, replace=False))
        payload: PhotoPayload = {
            "photo_id": f"p{i}",
            "title": title,
            "tags": list(rng.choice(TAGS, size=2, replace=False)),
            "photographer": PHOTOGRAPHERS[i % len(PHOTOGRAPHERS)],
            "license": "cc-by" if i % 4 else "rights-managed",
            "created_at": f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}T12:00:00+00:00",
            GROUP_FIELD: group if i % 5 < 1 + i // 5 % 4 else f"p{i}",
        }
        points.append(PhotoPoint(f"p{i}", vector, payload))
    return points


@dataclass
class InlineCalls:
    """What query_api.search.arrange reads of the API's store calls (and, in earlier trees, of its
    Services): the store, the settings, and the store's threads (here: the calling thread)."""

    store: VectorStore
    settings: Settings

    async def run(self, operation: str, call: Callable[[], T]) -> T:
        return call()

    async def in_store(self, operation: str, call: Callable[[], T]) -> T:
        return call()

    def head(self) -> tuple[Any, ...]:
        """arrange's leading arguments: (svc) in trees before it took its parts, (calls,
        rerank_pool) before re-ranking left the event loop, else (calls, reranking) (with
        the calls inside its candidates since it takes them)."""
        params = list(inspect.signature(arrange).parameters)
        if params[0] == "svc":
            return (self,)
        if params[1] == "reranking":
            # Imported here: the trees measured before it have no such module.
            from query_api.search.reranking import Reranking

            return (self, Reranking.of(self.settings.api))
        return (self, self.settings.api.rerank_pool)


def open_engine(engine: str, folder: Path) -> VectorStore:
    if engine == "edge":
        return open_store(Settings(data_dir=folder))
    return open_store(Settings(data_dir=folder, qdrant=QdrantSettings(url=":memory:")))


def build(engine: str, folder: Path, points: list[PhotoPoint], dim: int) -> VectorStore:
    store = open_engine(engine, folder)
    store.create_collection(COLLECTION, dim, bulk=True)
    for start in range(0, len(points), 500):
        store.upsert(COLLECTION, points[start : start + 500])
    store.finish_bulk_load(COLLECTION)
    store.optimize(COLLECTION)
    return store


def searches(
    store: VectorStore, settings: Settings, loop: asyncio.AbstractEventLoop
) -> dict[str, Callable[[np.ndarray[Any, np.dtype[Any]], str], object]]:
    """Each kind of search, given a query vector and a query text; `loop` runs the async ones
    (not asyncio.run: it installs a SIGINT handler that holds the task, which signal.signal
    then formats, result and all: 0.1 s for a page of 100 vectors)."""
    head = InlineCalls(store, settings).head()
    plain = SearchFilter()
    narrow = SearchFilter(tags_any=("cat", "dog"), photographer="bob", license="cc-by")

    def page(query: str, **options: Any) -> TextSearch:
        return TextSearch(q=query, limit=LIMIT, **options)

    def nearest(vector: Any, options: Page) -> Fetch:
        return nearest_fetch(store, COLLECTION, vector, options, ())

    def arranged(vector: Any, query: str, hybrid: bool, **options: Any) -> object:
        search = page(query, **options)
        fetch = (
            HybridPlan.of(store, COLLECTION, search, vector).fetch
            if hybrid
            else nearest(vector, search)
        )
        run = cast(Any, arrange)
        if "candidates" in inspect.signature(arrange).parameters:
            # Imported here: the trees measured before it have no such class.
            from query_api.search.arrange import Candidates

            calls, reranking = head
            candidates = Candidates(calls, "text", COLLECTION, fetch, pooled=hybrid)
            return loop.run_until_complete(run(candidates, reranking, search, Stages()))
        return loop.run_until_complete(
            run(*head, "text", COLLECTION, search, Stages(), fetch, pooled=hybrid)
        )

    return {
        "vector": lambda v, _: store.search(COLLECTION, v, limit=LIMIT, filter=plain),
        "filtered vector": lambda v, _: store.search(COLLECTION, v, limit=LIMIT, filter=narrow),
        "keyword": lambda _, q: store.keyword_search(COLLECTION, query_vector(q), limit=LIMIT),
        "hybrid": lambda v, q: arranged(v, q, True, collapse=False),
        "hybrid, filtered": lambda v, q: arranged(
            v, q, True, collapse=False, tags_any=["cat", "dog"], photographer="bob"
        ),
        "recommend": lambda v, _: store.recommend(COLLECTION, [v], [], limit=LIMIT),
        "diverse (MMR 0.5)": lambda v, q: arranged(v, q, False, collapse=False, diversity=0.5),
        "collapsed duplicates": lambda v, q: arranged(v, q, False, collapse=True),
        "hybrid, collapsed, diverse": lambda v, q: arranged(
            v, q, True, collapse=True, diversity=0.5
        ),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextmanager
def built(engine: str, points: list[PhotoPoint], dim: int) -> Iterator[VectorStore]:
    with tempfile.TemporaryDirectory(prefix=f"bench-store-{engine}-") as tmp:
        store = build(engine, Path(tmp), points, dim)
        try:
            yield store
        finally:
            store.close()


def timings(
    engine: str, points: list[PhotoPoint], dim: int, queries: int
) -> dict[str, list[float]]:
    """Milliseconds of each query, per kind."""
    rng = np.random.default_rng(11)
    # Queries near stored photos (as a text query lands near what it describes) and 2-3 words.
    vectors = [points[int(i)].vector for i in rng.integers(0, len(points), size=queries)]
    vectors = [v + 0.1 * rng.normal(size=dim) for v in vectors]
    vectors = [(v / np.linalg.norm(v)).astype(np.float32) for v in vectors]
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 4)))) for _ in range(queries)]
    spent_by_kind: dict[str, list[float]] = {}
    loop = asyncio.new_event_loop()
    with built(engine, points, dim) as store, closing(loop):
        kinds = searches(store, Settings(), loop)
        for kind, run in kinds.items():
            run(vectors[0], texts[0])  # warm: the first call pays for lazy set-up
            spent = []
            for vector, text in zip(vectors, texts, strict=True):
                start = time.perf_counter()
                run(vector, text)
                spent.append((time.perf_counter() - start) * 1000)
            spent_by_kind[kind] = spent
    return spent_by_kind


@dataclass
class StoreFigures:
    photos: int
    dim: int
    queries: int
    ms: dict[str, dict[str, list[float]]]  # engine -> kind -> each query's ms


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--engines", default="edge,local", help="edge and/or local")
    return parser


def measure(args: argparse.Namespace) -> StoreFigures:
    points = photos(args.photos, args.dim)
    engines = args.engines.split(",")
    ms = {engine: timings(engine, points, args.dim, args.queries) for engine in engines}
    return StoreFigures(args.photos, args.dim, args.queries, ms)


def table(results: dict[str, dict[str, list[float]]]) -> str:
    engines = list(results)
    head = "| search | " + " | ".join(f"{e} median ms | {e} p95 ms" for e in engines) + " |"
    rule = "|---|" + "---:|---:|" * len(engines)
    rows = [head, rule]
    for kind in next(iter(results.values())):
        cells = []
        for engine in engines:
            spent = results[engine][kind]
            cells.append(f"{statistics.median(spent):.2f} | {percentile(spent, 0.95):.2f}")
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# -- its rows in docs/benchmarks.md (loadtests/registry.py): Edge's, the engine `up` runs ------


def kind_figure(kind: str) -> Figure[StoreFigures]:
    def context(f: StoreFigures) -> str:
        edge = f.ms["edge"][kind]
        local = f.ms.get("local", {}).get(kind)
        beside = f"; qdrant-client's local mode {statistics.median(local):.2f} ms" if local else ""
        return (
            f"p95 {percentile(edge, 0.95):.2f} ms{beside}; {f.photos} photos x {f.dim} dims, "
            f"pages of {LIMIT}, {f.queries} queries"
        )

    return Figure(
        f"{kind} search, p50",
        "ms",
        lambda f: statistics.median(f.ms["edge"][kind]),
        context,
    )


KINDS = (
    "vector",
    "filtered vector",
    "keyword",
    "hybrid",
    "hybrid, filtered",
    "recommend",
    "diverse (MMR 0.5)",
    "collapsed duplicates",
    "hybrid, collapsed, diverse",
)
FIGURES: list[Figure[StoreFigures]] = [kind_figure(kind) for kind in KINDS]


def main(argv: list[str] | None = None) -> None:
    f = measure(parser().parse_args(argv))
    print(f"{f.photos} photos x {f.dim} dims, {f.queries} queries a kind, page of {LIMIT}")
    print()
    print(table(f.ms))


if __name__ == "__main__":
    main()
