"""Suggestion latency (GET /v1/suggest) over a realistic index: in-process lookups in the
replica's index, and whole requests through the real app over HTTP.

    python -m loadtests.bench_suggest [--queries 50000] [--terms 100000] [--tags 20000]
                                      [--lookups 20000] [--requests 5000]
                                      [--store-photos 100000]

The index holds `--queries` popular queries (1 to 4 words), `--terms` words of titles and
tags and `--tags` tags, words drawn from a Zipf law as a stock site's titles are; the typed
texts are every prefix of queries drawn by popularity, as a person types them (a page asks
once per keystroke). It prints the index's build time (a refresh's CPU) and size, and the
latency percentiles of a lookup and of a request (client to app and back, on this machine,
one at a time over a kept-alive connection). No Redis, Triton or store answers a suggestion:
the app starts with none reachable, its index set to the generated one. --store-photos N
also times a refresh's read of the vocabulary from N photos' payload indexes on Qdrant Edge.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import uvicorn

from core.feedback.suggestlog import PopularQuery
from core.payload import PhotoPayload
from core.settings import RedisSettings, Settings
from core.settings_api import ApiSettings
from core.vectorstore import PhotoPoint, collection_name
from core.vectorstore.base import SearchTuning
from core.vectorstore.edge import EdgeStore
from core.vectorstore.schema import CollectionSchema
from harness.processes import free_ports
from loadtests.registry import Figure
from query_api.app import create_app
from query_api.suggest.index import SuggestIndex, Vocabulary
from query_api.suggest.suggestions import Suggestions

SEED = 35
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


def words(n: int, rng: random.Random) -> list[str]:
    """n distinct word-like strings of 3 to 12 letters, frequent letters first."""
    found: dict[str, None] = {}
    weights = [1 / (i + 1) for i in range(len(_LETTERS))]
    while len(found) < n:
        length = min(12, max(3, int(rng.gauss(7, 2))))
        found["".join(rng.choices(_LETTERS, weights, k=length))] = None
    return list(found)


def zipf_weights(n: int) -> list[float]:
    return [1 / (rank + 1) for rank in range(n)]


def realistic(
    n_queries: int, n_terms: int, n_tags: int, rng: random.Random
) -> tuple[list[PopularQuery], Vocabulary]:
    vocabulary = words(n_terms, rng)
    weights = zipf_weights(n_terms)
    photos = 100_000_000  # a word's photos: Zipf over a collection of 1e8
    terms = [(w, max(1, int(photos * 0.01 / (i + 1)))) for i, w in enumerate(vocabulary)]
    tags = [(w, count) for w, count in terms[:n_tags]]
    queries: dict[str, None] = {}
    while len(queries) < n_queries:
        k = rng.choice((1, 2, 2, 3, 3, 4))
        queries[" ".join(rng.choices(vocabulary, weights, k=k))] = None
    popular = [
        PopularQuery(text, max(3, 10_000 // (i + 1)), max(3, 30_000 // (i + 1)))
        for i, text in enumerate(queries)
    ]
    return popular, Vocabulary(tuple(tags), tuple(terms))


def typed(queries: Sequence[PopularQuery], n: int, rng: random.Random) -> list[str]:
    """n texts as people type them: each prefix of a query drawn by its popularity, and one
    word in five a word no query holds (a new search)."""
    weights = zipf_weights(len(queries))
    texts: list[str] = []
    while len(texts) < n:
        query = rng.choices(queries, weights)[0].text
        if rng.random() < 0.2:
            query = f"{query} {''.join(rng.choices(_LETTERS, k=6))}"
        texts.extend(query[:end] for end in range(1, len(query) + 1) if query[:end].strip())
    return texts[:n]


def percentiles(seconds: Sequence[float]) -> str:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    ms = {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "max": max(seconds)}
    return "  ".join(f"{name} {value * 1000:.3f} ms" for name, value in ms.items())


def in_process(index: SuggestIndex, texts: Sequence[str]) -> list[float]:
    took = []
    for text in texts:
        start = time.perf_counter()
        index.complete(text, 8)
        took.append(time.perf_counter() - start)
    return took


def through_http(
    queries: list[PopularQuery], vocabulary: Vocabulary, texts: Sequence[str]
) -> list[float]:
    """The real app under uvicorn on a thread, its index set; requests one at a time."""
    with tempfile.TemporaryDirectory() as folder:
        api_port, metrics_port, dead = free_ports(3)
        settings = Settings(
            data_dir=Path(folder),
            # Nothing listens there: the refresh fails and keeps the index it was given.
            redis=RedisSettings(
                url=f"redis://127.0.0.1:{dead}/0", cache=f"redis://127.0.0.1:{dead}/1"
            ),
            api=ApiSettings(anonymous_search=True, metrics_port=metrics_port),
        )
        app = create_app(settings)
        config = uvicorn.Config(app, host="127.0.0.1", port=api_port, log_level="error")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        suggestions: Suggestions = app.state.suggestions
        while suggestions.finished < 1:  # the first refresh found nothing to read
            time.sleep(0.05)
        # Later refreshes read nothing either, and keep this index.
        suggestions.index = SuggestIndex(queries, vocabulary)
        took = []
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{api_port}") as client:
                for text in texts[:200]:  # warm the connection and the app
                    client.get("/v1/suggest", params={"q": text})
                for text in texts:
                    start = time.perf_counter()
                    answer = client.get("/v1/suggest", params={"q": text})
                    took.append(time.perf_counter() - start)
                    if answer.status_code != 200:
                        raise RuntimeError(f"{text!r}: {answer.status_code} {answer.text}")
        finally:
            server.should_exit = True
            thread.join(15)
    return took


def vocabulary_read(photos: int, n_terms: int, rng: random.Random) -> str:
    """What a refresh's vocabulary read costs: `photos` photos on Qdrant Edge, each with 12
    words of a Zipf vocabulary in `terms` and 4 tags, the top `n_terms` of each read."""
    vocabulary = words(n_terms, rng)
    weights = zipf_weights(n_terms)
    with tempfile.TemporaryDirectory() as folder:
        store = EdgeStore(
            Path(folder),
            schema=CollectionSchema(hnsw_ef_construct=64, quantizer=None),
            tuning=SearchTuning(hnsw_ef=64),
        )
        try:
            name = collection_name(1, "bench")
            store.create_collection(name, 4)
            vector = np.asarray([1, 0, 0, 0], dtype=np.float32)
            for start in range(0, photos, 5000):
                batch = []
                for i in range(start, min(photos, start + 5000)):
                    chosen = list(dict.fromkeys(rng.choices(vocabulary, weights, k=12)))
                    payload: PhotoPayload = {
                        "photo_id": f"p{i}",
                        "terms": chosen,
                        "tags": chosen[:4],
                    }
                    batch.append(PhotoPoint(f"p{i}", vector, payload))
                store.upsert(name, batch)
            took = {}
            for field in ("tags", "terms"):
                start_s = time.perf_counter()
                found = store.value_counts(name, field, limit=n_terms)
                took[field] = (time.perf_counter() - start_s, len(found))
        finally:
            store.close()
    return ", ".join(f"{f} {s * 1000:.0f} ms ({n} values)" for f, (s, n) in took.items())


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--terms", type=int, default=100_000)
    parser.add_argument("--tags", type=int, default=20_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument(
        "--store-photos", type=int, default=0, help="also time the vocabulary's read (Edge)"
    )
    return parser


@dataclass
class SuggestFigures:
    index: str  # what the index holds, its build time and size
    lookups: list[float]  # seconds of each in-process lookup
    requests: list[float]  # seconds of each GET /v1/suggest
    read: str  # the vocabulary read's times, "" unless --store-photos


def measure(args: argparse.Namespace) -> SuggestFigures:
    rng = random.Random(SEED)
    queries, vocabulary = realistic(args.queries, args.terms, args.tags, rng)
    texts = typed(queries, max(args.lookups, args.requests), rng)

    tracemalloc.start()
    start = time.perf_counter()
    index = SuggestIndex(queries, vocabulary)
    built = time.perf_counter() - start
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    found = sum(1 for text in texts[: args.lookups] if index.complete(text, 8))
    about = (
        f"index: {args.queries} queries, {len(index.whole) - index.queries} tags, "
        f"{len(index.words)} words; built in {built:.2f} s; ~{size / 2**20:.0f} MiB of Python "
        f"objects; {found / args.lookups:.0%} of typed prefixes get a suggestion"
    )
    lookups = in_process(index, texts[: args.lookups])
    requests = through_http(queries, vocabulary, texts[: args.requests])
    read = vocabulary_read(args.store_photos, args.terms, rng) if args.store_photos else ""
    return SuggestFigures(about, lookups, requests, read)


def report(args: argparse.Namespace, f: SuggestFigures) -> str:
    lines = [
        f.index,
        f"in-process lookup ({len(f.lookups)} typed prefixes, limit 8): {percentiles(f.lookups)}",
        f"HTTP GET /v1/suggest ({len(f.requests)} sequential): {percentiles(f.requests)}",
    ]
    if f.read:
        lines.append(f"vocabulary read, {args.store_photos} photos on Qdrant Edge: {f.read}")
    return "\n".join(lines)


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def ms(seconds: Sequence[float], percent: int) -> float:
    return statistics.quantiles(seconds, n=100, method="inclusive")[percent - 1] * 1000


FIGURES: list[Figure[SuggestFigures]] = [
    Figure(
        "in-process lookup p50",
        "µs",
        lambda f: ms(f.lookups, 50) * 1000,
        lambda f: (
            f"the replica's index, {len(f.lookups)} typed prefixes, limit 8; "
            f"p99 {ms(f.lookups, 99) * 1000:.0f} µs"
        ),
    ),
    Figure(
        "suggest request p50",
        "ms",
        lambda f: ms(f.requests, 50),
        lambda f: (
            f"GET /v1/suggest through the real app, {len(f.requests)} one at a time; "
            f"p99 {ms(f.requests, 99):.2f} ms"
        ),
    ),
]


def main() -> None:
    args = parser().parse_args()
    print(report(args, measure(args)))


if __name__ == "__main__":
    main()
