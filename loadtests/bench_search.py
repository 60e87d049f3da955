"""Benchmark the search features: how keyword, vector and hybrid text search rank photos
whose relevance a judgement set gives, and what each kind of search costs.

    python -m loadtests.bench_search [--repository DIR] [--data-dir DIR] [--photos 100000]
                                     [--seconds 20] [--rate 2] [--synthetic] [--samples 1000]

1. Relevance. A judgement set's photos indexed by a real `photosearch worker` into a store of
   their own, and its queries asked of the API in each mode (collapse=false: the ranking
   itself, not the near-duplicate grouping; the hybrid row fuses as the API does, with the
   model version's calibration where its manifest has one): nDCG@10, recall@10 and MRR@10
   (core.quality.metrics), each a mean over the queries with a seeded bootstrap interval,
   beside a random order of the same photos. The truth is what the photos show, never the
   words the keyword ranking matches: the demo photos (core/demo.py) with the shipped demo set
   (core/quality/sets/demo), and with --synthetic the synthetic photos and their judgements
   (model/synthetic_judgements.py), which only a model trained on such photos understands
   (the tiny model of model/train.py; `photosearch model synthetic` writes the same set).
   Other fusions than the API's are not compared here: `photosearch model calibrate` ranks a
   judgement set through every (k, keyword weight) of its grid with the store's own weighted
   fusion (loadtests/bench_quality.py prints them). The default export has random weights:
   its vector ranking is noise, and the report says so; --repository with a pretrained
   export measures real ones.
2. Cost. Each kind of search OPEN LOOP at --rate/s (the design's average) against bench_api's
   store (--photos points whose payloads hold titles, tags and a near-duplicate group; built
   once in --data-dir and reused): p50 and p99 from each request's scheduled time, and the
   medians of the API's own Server-Timing stages. Text searches run uncached (every query new)
   and cached (the query embedding in Redis) where an embedding is made.

Prints Markdown tables; no thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import httpx

from core.demo import DEMO_PHOTOS, write_demo_photos
from core.embedding.manifest import load_manifest
from core.quality.judgements import SETS, JudgementSet, load_judgements
from core.quality.runner import Evaluation
from core.settings import Settings
from harness.machine import commit, machine
from harness.models import ensure_model
from harness.processes import (
    api_process,
    bench_settings,
    free_ports,
    process_env,
    redis_process,
    running,
    sync_folder,
    triton_ports,
)
from harness.store import ensure_store, store_arguments
from harness.vocabulary import Queries, photo_key
from loadtests.openloop import (
    LIMIT,
    OPERATOR_KEY,
    Phase,
    Request,
    keep_alive,
    run_phase,
    search_target,
)
from loadtests.relevance import evaluations, fusion_name, photo_ids, rankers, relevance_table
from model.synthetic import DEFAULT_COUNT
from model.synthetic_judgements import write_set
from model.triton_server import TritonServer
from query_api.http.auth import hash_key
from query_api.http.timing import STAGES

CACHED_QUERIES = 50  # the pre-warmed set the cached phases draw from
DEMO_SET = SETS / "demo"


# -- 1. relevance on the judgement sets --------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """A judgement set and the folder of its photos."""

    judgements: JudgementSet
    photos: Path


def judge(
    judged: Judged, values: dict[str, Any], work: Path, hybrid: str, args: argparse.Namespace
) -> tuple[int, dict[str, Evaluation]]:
    """The set's photos indexed into the store of `values`: how many, and each ranking's
    figures."""
    name = judged.judgements.name
    print(f"indexing the {name} set's photos ...", flush=True)
    sync_folder(values, judged.photos, work / f"worker-{name}.log", timeout_s=600)
    ids = photo_ids(judged.photos, Settings(**values))
    print(f"{len(judged.judgements.queries)} {name} queries in 3 modes ...", flush=True)
    with (
        api(values, work / f"api-{name}.log") as url,
        httpx.Client(base_url=url, headers={"X-API-Key": OPERATOR_KEY}, timeout=30) as http,
    ):
        return len(ids), evaluations(
            judged.judgements,
            rankers(http, ids, hybrid),
            collection=name,
            samples=args.samples,
            seed=args.seed,
        )


# -- 2. the cost of each kind of search --------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One phase: its name, whether its query embeddings are cached (None: it makes none
    from text), and its requests."""

    name: str
    cached: bool | None
    targets: list[str | Request]


def text_specs(count: int, fresh: Queries, popular: list[str]) -> list[Spec]:
    r = random.Random(1)

    def pick() -> str:
        return r.choice(popular)

    def texts(cached: bool, **params: object) -> list[str | Request]:
        return [search_target(pick() if cached else fresh.next(), **params) for _ in range(count)]

    def nots(cached: bool) -> list[str | Request]:
        pairs = [r.sample(popular, 2) if cached else fresh.take(2) for _ in range(count)]
        return [search_target(q, **{"not": [n]}) for q, n in pairs]

    vector = {"mode": "vector", "collapse": "false"}
    return [
        Spec("vector, collapse=false", False, texts(False, **vector)),
        Spec("vector, collapse=false", True, texts(True, **vector)),
        Spec("vector (collapse on)", True, texts(True, mode="vector")),
        Spec("hybrid (default)", False, texts(False)),
        Spec("hybrid (default)", True, texts(True)),
        Spec("hybrid, collapse=false", True, texts(True, collapse="false")),
        Spec("hybrid, diversity=0.5", True, texts(True, diversity=0.5)),
        Spec("hybrid, sort=newest", True, texts(True, sort="newest")),
        Spec("hybrid, not=...", False, nots(False)),
        Spec("hybrid, not=...", True, nots(True)),
        Spec("keyword", None, texts(True, mode="keyword")),
    ]


def other_specs(count: int, photos: int, image: Path, image_url: str) -> list[Spec]:
    r = random.Random(2)

    def examples() -> str:
        picked = [("positive", photo_key(r.randrange(photos))) for _ in range(3)]
        picked[2] = ("negative", picked[2][1])
        return urlencode([*picked, ("limit", LIMIT)])

    recommend: list[str | Request] = [f"/v1/search/recommend?{examples()}" for _ in range(count)]
    data = image.read_bytes()

    def form() -> aiohttp.FormData:
        made = aiohttp.FormData()
        made.add_field("file", data, filename=image.name, content_type="image/jpeg")
        return made

    path = f"/v1/search/image?limit={LIMIT}"
    return [
        Spec("recommend, 2 positive 1 negative", None, recommend),
        Spec(f"image upload ({image.name})", None, [Request(path, form=form)] * count),
        Spec("image by URL (127.0.0.1)", None, [Request(path, json={"url": image_url})] * count),
    ]


async def run_specs(
    url: str, rate: float, specs: Sequence[Spec], popular: list[str]
) -> list[Phase]:
    phases = []
    async with keep_alive(url, 64, {"X-API-Key": OPERATOR_KEY}) as http:
        for query in popular:  # their embeddings into the cache
            async with http.get(search_target(query, mode="vector")) as answer:
                answer.raise_for_status()
        for spec in specs:
            print(f"{spec.name}, cached {spec.cached}, {rate:g}/s ...", flush=True)
            cached = bool(spec.cached)
            phases.append(
                await run_phase(
                    http, None, spec.name, rate, spec.targets, cached, warm_connections=8
                )
            )
    return phases


def cost_table(specs: Sequence[Spec], phases: Sequence[Phase]) -> str:
    seen = {s for p in phases for o in p.outcomes for s in o.stages}
    # A stage the API names beside STAGES (the URL's fetch) too.
    order = [*STAGES, *sorted(seen - {*STAGES, "other", "total"}), "other", "total"]
    stages = [s for s in order if s in seen]
    lines = [
        "| search | query embedding | requests | errors | cache flag wrong | p50 ms | p99 ms | "
        + " | ".join(f"API: {s}" for s in stages)
        + " |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(stages),
    ]
    for spec, p in zip(specs, phases, strict=True):
        cached = {True: "cached", False: "uncached", None: "-"}[spec.cached]
        cells = " | ".join(f"{p.stage_p50_ms(s):.2f}".replace("nan", "-") for s in stages)
        lines.append(
            f"| {p.name} | {cached} | {len(p.outcomes)} | {p.errors} | {p.wrong_cache} "
            f"| {p.ms(50):.1f} | {p.ms(99):.1f} | {cells} |"
        )
    return "\n".join(lines)


# -- the processes -----------------------------------------------------------------------------


@contextmanager
def file_server(folder: Path) -> Iterator[str]:
    """A plain HTTP server of `folder` on 127.0.0.1, for the search by URL: its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def api(values: dict[str, Any], log: Path) -> Iterator[str]:
    """`photosearch api serve` on the store of `values`, the operator's key its only one, and
    127.0.0.1 allowed to an image search by URL: its base URL."""
    port, metrics_port = free_ports(2)
    keys = [{"name": "bench", "sha256": hash_key(OPERATOR_KEY), "scopes": ["search", "admin"]}]
    settings = values | {
        "api": {
            **values.get("api", {}),
            "keys": json.dumps(keys),
            "metrics_port": metrics_port,
            "image_url_allow": json.dumps(["127.0.0.1"]),
        }
    }
    with running(api_process(process_env(settings), port, log, "warning")):
        yield f"http://127.0.0.1:{port}"


@dataclass
class SearchFigures:
    arch: str
    weights: str
    random_weights: bool
    sets: dict[str, tuple[int, dict[str, Evaluation]]]  # name -> its photos, each ranking's
    specs: list[Spec]
    phases: list[Phase]


def measure(args: argparse.Namespace) -> SearchFigures:
    repo = args.repository.resolve()
    version = ensure_model(repo, args.arch)
    manifest = load_manifest(repo, version)
    count = max(1, round(args.rate * args.seconds))
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        demo = write_demo_photos(work / "demo")
        shown = [p for p in DEMO_PHOTOS if p.id in (*demo.written, *demo.kept)]
        redis, redis_url = redis_process(work)
        stack.enter_context(running(redis))
        triton = stack.enter_context(TritonServer(repo, triton_ports(), work / "triton"))

        judged = [Judged(load_judgements(DEMO_SET), demo.target)]
        if args.synthetic:
            made = write_set(work / "synthetic", args.synthetic_photos)
            synthetic = replace(load_judgements(made.judgements), name="synthetic")
            judged.append(Judged(synthetic, made.photos))
        hybrid = fusion_name(manifest)
        sets = {
            j.judgements.name: judge(
                j,
                bench_settings(work / f"data-{i}", triton.url, repo, redis_url),
                work,
                hybrid,
                args,
            )
            for i, j in enumerate(judged)
        }

        values = bench_settings(args.data_dir.resolve(), triton.url, repo, redis_url)
        settings = Settings(**values)
        store, _ = ensure_store(
            settings, version, manifest.embedding_dim, args.photos, args.clusters, args.rebuild
        )
        store.close()  # the API process owns the store from here on
        fresh = Queries(seed=0)
        popular = fresh.take(CACHED_QUERIES)
        image = next(p for p in shown if p.filename.endswith(".jpg"))
        base = stack.enter_context(file_server(demo.target))
        specs = text_specs(count, fresh, popular) + other_specs(
            count, args.photos, demo.target / image.filename, f"{base}/{image.filename}"
        )
        with api(values, work / "api.log") as url:
            phases = asyncio.run(run_specs(url, args.rate, specs, popular))
    return SearchFigures(
        manifest.arch, manifest.weights, manifest.random_weights, sets, specs, phases
    )


def report(args: argparse.Namespace, f: SearchFigures) -> str:
    noise = (
        f"**{f.arch} has random weights here: its vector ranking is noise**, and so is that "
        "part of the hybrid one (compare the chance row); a pretrained export (--repository) "
        "measures real ones."
        if f.random_weights
        else f"{f.arch} with weights {f.weights}."
    )
    relevance = []
    for name, (photos, found) in f.sets.items():
        relevance += [
            "",
            f"Relevance, the {name} set: its queries that judge a photo relevant, over its "
            f"{photos} photos; mean [{args.samples} bootstrap samples, 95% interval].",
            "",
            relevance_table(found),
        ]
    return "\n".join(
        [
            "",
            f"{machine()}, commit {commit()}",
            "command: " + shlex.join(["python", "-m", "loadtests.bench_search", *sys.argv[1:]]),
            "",
            "Relevance: the judgement sets' queries through the API in each mode, collapse=false; "
            "relevant: what the set's judgements say each photo shows. " + noise,
            *relevance,
            "",
            f"Cost: open loop at {args.rate:g}/s for {args.seconds:g} s each, against "
            f"{args.photos} photos (ms from each request's scheduled time; API stages: medians "
            "of its Server-Timing; cache flag wrong: answers whose `cached` was not the phase's).",
            "",
            cost_table(f.specs, f.phases),
        ]
    )


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    store_arguments(parser)
    parser.add_argument("--rebuild", action="store_true", help="build the store again")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--rate", type=float, default=2.0, help="requests/s of each phase")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="also the synthetic set: for a model trained on such photos (model/train.py)",
    )
    parser.add_argument(
        "--synthetic-photos",
        type=int,
        default=DEFAULT_COUNT,
        help=f"photos of the synthetic set (default {DEFAULT_COUNT}: the shipped set's)",
    )
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap samples")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    return parser


def main() -> None:
    args = parser().parse_args()
    print(report(args, measure(args)))


if __name__ == "__main__":
    main()
