"""Benchmark the vector search's recall@10 against exact search, by search setting.

    python -m loadtests.bench_recall [--queries 500] [--ef 32,64,128,256]
                                     [--oversampling 1,1.5,2,3] [--qdrant-url URL]

On the API benchmark's store (100,000 unit vectors of 512 dims around 1,000 centres in Qdrant
Edge, int8 quantization, HNSW m=16 ef_construct=128: built by bench_api and shared with it), each
query is searched exactly (every original vector compared: the ground truth), then with each
setting of the grid: hnsw_ef x oversampling with rescoring, and the int8 copies ignored (the
graph walked on the original vectors) as a reference. recall@10 is the share of the exact top 10
an approximate search returns; latency is store.search() in this process, payloads included.

The queries are drawn near the store's clusters, not taken from it, in two kinds:
- text: a search as the API runs it. A CLIP text embedding sits much farther from the photos it
  matches (cosine ~0.3 for ViT-B-32) than photos of one subject sit from each other (~0.7-0.9):
  here the centre plus noise of norm --text-noise, so the best photos score ~0.3 and the top 10
  are close together. The defaults are chosen on these.
- photo: a new photo of a cluster, drawn like the stored ones (similar photos, the reindex check).
(The API benchmark embeds its texts with random weights: against this synthetic store they point
nowhere in particular, so they are not used here.)

A Qdrant server cannot run on this machine (qdrant-client's local mode is brute force: exact): its
figures are measured only with --qdrant-url, where the same points are loaded into a collection
of their own. Both stores send the same search parameters (core.vectorstore.SearchTuning).
Prints Markdown tables; no thresholds are enforced.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from core.embedding.manifest import load_manifest
from core.settings import Settings
from core.vectorstore import SearchTuning, VectorStore, collection_name, open_store
from harness.models import ensure_model
from harness.store import (
    TEXT_NOISE,
    ensure_store,
    fill_store,
    store_arguments,
)
from loadtests.recall_search import (
    KINDS,
    TARGET,
    K,
    KindFigures,
    Measured,
    grid,
    label,
    measure_store,
    query_vectors,
)
from loadtests.registry import Figure
from loadtests.startup import command, embedded_store_only, ran

SERVER_TAG = "recallbench"  # the server collection holding the same points


@dataclass
class RecallFigures:
    """What one run measured, by store: Qdrant Edge, and a server where --qdrant-url names one."""

    photos: int
    clusters: int
    dim: int
    queries: int
    text_noise: float
    shipped: SearchTuning  # the settings' (the defaults unless PHOTOSEARCH_QDRANT__* changed them)
    hnsw: str
    stores: dict[str, list[KindFigures]]
    load_before: float

    def edge(self, kind: str = "text") -> KindFigures:
        return next(k for k in self.stores[EDGE] if k.kind == kind)


EDGE = "Qdrant Edge"
HEADER = (
    "| setting | recall@10 | worst query | mean ms | p50 ms | p99 ms |\n"
    "|---|---:|---:|---:|---:|---:|"
)


def row(m: Measured, shipped: SearchTuning) -> str:
    name = f"**{label(m.tuning)}** (shipped)" if m.tuning == shipped else label(m.tuning)
    return (
        f"| {name} | {m.recall:.4f} | {m.worst:.1f} | {m.mean_ms:.2f} | {m.p50_ms:.2f} "
        f"| {m.p99_ms:.2f} |"
    )


def report(figures: RecallFigures) -> str:
    s = figures.shipped
    lines = [
        "",
        f"recall@{K} against exact search: {figures.photos} photos x {figures.dim} dims around "
        f"{figures.clusters} centres ({figures.hnsw}), {figures.queries} queries of each kind, "
        + ran(),
        f"command: {command('loadtests.bench_recall')}",
        f"load average before the run: {figures.load_before:.2f} (latencies move with other work "
        "on the machine; recall does not)",
        f"shipped settings: hnsw_ef {s.hnsw_ef}, oversampling {s.oversampling:g} "
        "(PHOTOSEARCH_QDRANT__HNSW_EF, PHOTOSEARCH_QDRANT__OVERSAMPLING)",
    ]
    if list(figures.stores) == [EDGE]:
        lines.append(
            "Qdrant server: not measured here (none can run on this machine; give --qdrant-url). "
            "It is sent the same search parameters as Qdrant Edge."
        )
    for store, kinds in figures.stores.items():
        for k in kinds:
            about = (
                f"text queries (noise {figures.text_noise:g} around a centre)"
                if k.kind == "text"
                else "photo queries (drawn like the stored photos)"
            )
            fastest = k.fastest()
            lines += [
                "",
                f"{store}, {about}: the exact top hit scores {k.top1:.3f} on average, the "
                f"10th {k.tenth:.3f}; exact search {k.exact.mean_ms:.2f} ms mean, "
                f"{k.exact.p50_ms:.2f} p50",
                "",
                HEADER,
                *(row(m, s) for m in k.rows),
                "",
                f"fastest with recall >= {TARGET:g}: "
                + (
                    f"{label(fastest.tuning)} ({fastest.recall:.4f}, {fastest.mean_ms:.2f} ms)"
                    if fastest
                    else "none"
                ),
            ]
    return "\n".join(lines)


def server_store(
    settings: Settings, url: str, version: int, dim: int, photos: int, clusters: int
) -> tuple[VectorStore, str]:
    """The same points in a collection of their own on a Qdrant server, loaded when missing."""
    qdrant = settings.qdrant.model_copy(update={"url": url})
    store = open_store(settings.model_copy(update={"qdrant": qdrant}))
    collection = collection_name(version, SERVER_TAG)
    if store.has_collection(collection) and store.count(collection) == photos:
        print(f"server: {url} {collection} ({photos} photos, loaded before)", flush=True)
        return store, collection
    if store.has_collection(collection):
        store.drop_collection(collection)
    print(f"loading {photos} photos into {url} {collection} ...", flush=True)
    store.create_collection(collection, dim, bulk=True)
    fill_store(store, collection, dim, photos, clusters, version)
    store.finish_bulk_load(collection)
    while not store.index_ready(collection):
        time.sleep(2)
    return store, collection


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    store_arguments(parser)  # bench_api's store, built there when missing
    parser.add_argument("--queries", type=int, default=500, help="queries of each kind")
    parser.add_argument(
        "--kinds",
        type=lambda s: [k for k in s.split(",") if k],
        default=list(KINDS),
        help=f"query kinds, of {','.join(KINDS)} (default: both)",
    )
    parser.add_argument(
        "--text-noise",
        type=float,
        default=TEXT_NOISE,
        help=f"text queries: noise norm around a unit centre (default {TEXT_NOISE:g}: best "
        "hits ~0.3)",
    )
    parser.add_argument(
        "--ef",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[32, 64, 128, 256],
        help="hnsw_ef values (default: 32,64,128,256)",
    )
    parser.add_argument(
        "--oversampling",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 1.5, 2.0, 3.0],
        help="oversampling values, int8 rescored (default: 1,1.5,2,3)",
    )
    parser.add_argument(
        "--qdrant-url", help="also measure a Qdrant server (a collection of its own is loaded)"
    )
    return parser


def measure(args: argparse.Namespace) -> RecallFigures:
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"unknown query kinds {unknown}: choose from {', '.join(KINDS)}")
    repo = args.repository.resolve()
    embedded_store_only("the embedded store is in --data-dir (see --qdrant-url)")
    settings = Settings(data_dir=args.data_dir.resolve())
    load_before = os.getloadavg()[0]
    version = ensure_model(repo, args.arch)
    dim = load_manifest(repo, version).embedding_dim
    shipped = SearchTuning.of(settings.qdrant)
    settings_grid = grid(args.ef, args.oversampling)
    if shipped not in settings_grid:
        settings_grid.append(shipped)
    queries = {
        kind: query_vectors(kind, args.queries, dim, args.clusters, args.text_noise)
        for kind in args.kinds
    }
    q = settings.qdrant
    hnsw = (
        f"HNSW m={q.hnsw_m} ef_construct={q.hnsw_ef_construct}, "
        f"int8 quantization {'on' if q.quantization else 'off'}"
    )
    stores: dict[str, list[KindFigures]] = {}
    store, collection = ensure_store(settings, version, dim, args.photos, args.clusters, False)
    stores[EDGE] = measure_store(store, collection, queries, settings_grid)
    if args.qdrant_url:
        store, collection = server_store(
            settings, args.qdrant_url, version, dim, args.photos, args.clusters
        )
        stores[f"Qdrant server {args.qdrant_url}"] = measure_store(
            store, collection, queries, settings_grid
        )
    return RecallFigures(
        photos=args.photos,
        clusters=args.clusters,
        dim=dim,
        queries=args.queries,
        text_noise=args.text_noise,
        shipped=shipped,
        hnsw=hnsw,
        stores=stores,
        load_before=load_before,
    )


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def at_shipped(f: RecallFigures, kind: str = "text") -> Measured:
    """Qdrant Edge at the search settings the code ships (hnsw_ef, oversampling)."""
    return f.edge(kind).at(f.shipped)


def fastest_context(f: RecallFigures) -> str:
    fastest = f.edge().fastest()
    there = (
        f"{label(fastest.tuning)}, {fastest.p50_ms:.2f} ms p50" if fastest else "none in the grid"
    )
    return (
        f"Qdrant Edge in-process, limit {K}, text queries; exact search "
        f"{f.edge().exact.p50_ms:.1f} ms; fastest at >= {TARGET:.0%}: {there}"
    )


FIGURES: list[Figure[RecallFigures]] = [
    Figure(
        "recall@10 at the shipped search settings",
        "%",
        lambda f: at_shipped(f).recall * 100,
        lambda f: (
            f"asked: >= {TARGET:.0%} against exact search; hnsw_ef "
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


def main() -> None:
    print(report(measure(parser().parse_args())))


if __name__ == "__main__":
    main()
