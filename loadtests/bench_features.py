"""Benchmark what the stock-photo features cost a search: facet counts, business boosts and
suggestions, each against plain hybrid search, open loop at the design's average and peak.

    python -m loadtests.bench_features [--data-dir DIR] [--photos 100000] [--rebuild]
                                       [--seconds 20] [--rates 2,100]

Against bench_api's store (--photos points whose payloads hold what the indexer writes: titles,
tags, a near-duplicate group, the visual attributes, automatic tags and a popularity), served
by a real `photosearch api serve` with its Triton and Redis. The text searches draw from a set
of queries whose embeddings are cached first, so that the phases compare what the features
add, not the text encoder (bench_api measures uncached searches). Suggestions are asked for
prefixes of queries that three sessions searched, once the API's suggestion index holds them.
Each phase sends its requests OPEN LOOP at the rate: p50 and p99 from each request's scheduled
time, and the medians of the API's own Server-Timing stages. Prints a Markdown table; no
thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import aiohttp

from core.embedding.manifest import load_manifest
from core.settings import Settings
from core.settings_api import ApiSettings
from harness.models import ensure_model
from harness.processes import bench_settings, redis_process, running, triton_ports
from harness.store import ensure_store, store_arguments
from harness.vocabulary import Queries
from loadtests.openloop import OPERATOR_KEY, Phase, keep_alive, run_phase, search_target
from loadtests.registry import Figure
from loadtests.startup import api, command, ran
from model.triton_server import TritonServer
from query_api.http.timing import STAGES

CACHED_QUERIES = 50
# Every facet the page asks for on a first page.
FACETS = "tags,auto_tags,color,orientation,license,photographer"
BOOSTS = {"boost_recency": 0.01, "boost_popularity": 0.01}
SESSIONS = 3  # the default PHOTOSEARCH_API__SUGGEST_MIN_SESSIONS
SUGGEST_WAIT_S = 120.0


@dataclass(frozen=True)
class Spec:
    name: str
    targets: list[str]


def specs(count: int, popular: list[str], seed: int) -> list[Spec]:
    r = random.Random(seed)

    def texts(**params: object) -> list[str]:
        return [search_target(r.choice(popular), **params) for _ in range(count)]

    def prefixes() -> list[str]:
        chosen = [r.choice(popular) for _ in range(count)]
        return [
            "/v1/suggest?" + urlencode({"q": q[: r.randint(2, max(2, len(q) - 1))], "limit": 8})
            for q in chosen
        ]

    # The costliest last: a phase the machine cannot keep up with leaves a backlog behind it.
    return [
        Spec("hybrid (plain)", texts()),
        Spec("suggest (prefixes of popular queries)", prefixes()),
        Spec("hybrid + boosts (recency, popularity)", texts(**BOOSTS)),
        Spec("hybrid + facets (6 fields)", texts(facets=FACETS)),
        Spec("hybrid + facets + boosts", texts(facets=FACETS, **BOOSTS)),
    ]


async def prepare(http: aiohttp.ClientSession, popular: list[str]) -> None:
    """The popular queries' embeddings into the cache, each searched by SESSIONS sessions,
    then wait until the API suggests them (its index refreshes in the background)."""
    for n, query in enumerate(popular):
        for s in range(SESSIONS):
            headers = {"X-Session-Id": f"bench-session-{n}-{s}"}
            async with http.get(search_target(query), headers=headers) as answer:
                answer.raise_for_status()
    probe = popular[0]
    deadline = time.monotonic() + SUGGEST_WAIT_S
    while time.monotonic() < deadline:
        target = "/v1/suggest?" + urlencode({"q": probe[:-1], "limit": 20})
        async with http.get(target) as answer:
            answer.raise_for_status()
            found = [s["text"] for s in (await answer.json())["suggestions"]]
        if probe in found:
            return
        await asyncio.sleep(1.0)
    print(f"    warning: {probe!r} not suggested after {SUGGEST_WAIT_S:g} s", flush=True)


async def run_all(url: str, rates: list[float], seconds: float) -> list[tuple[Spec, Phase]]:
    popular = Queries(seed=0).take(CACHED_QUERIES)
    done = []
    async with keep_alive(url, 128, {"X-API-Key": OPERATOR_KEY}) as http:
        await prepare(http, popular)
        for rate in rates:
            for spec in specs(max(1, round(rate * seconds)), popular, seed=int(rate)):
                print(f"{spec.name}, {rate:g}/s ...", flush=True)
                phase = await run_phase(http, None, spec.name, rate, spec.targets, False)
                done.append((spec, phase))
    return done


def table(phases: list[tuple[Spec, Phase]]) -> str:
    seen = {s for _, p in phases for o in p.outcomes for s in o.stages}
    order = [*STAGES, *sorted(seen - {*STAGES, "other", "total"}), "other", "total"]
    stages = [s for s in order if s in seen]
    lines = [
        "| rate /s | request | requests | errors | p50 ms | p99 ms | "
        + " | ".join(f"API: {s}" for s in stages)
        + " |",
        "|---:|---|---:|---:|---:|---:|" + "---:|" * len(stages),
    ]
    for spec, p in phases:
        cells = " | ".join(f"{p.stage_p50_ms(s):.2f}".replace("nan", "-") for s in stages)
        lines.append(
            f"| {p.rate:g} | {spec.name} | {len(p.outcomes)} | {p.errors} "
            f"| {p.ms(50):.1f} | {p.ms(99):.1f} | {cells} |"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    store_arguments(parser)
    parser.add_argument("--rebuild", action="store_true", help="build the store again")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--rates", default="2,100", help="requests/s, comma-separated")
    parser.add_argument(
        "--facet-pool", type=int, default=None, help="PHOTOSEARCH_API__FACET_POOL (its default)"
    )
    return parser


@dataclass
class FeaturesFigures:
    arch: str
    pool: int  # the facet pool
    phases: list[tuple[Spec, Phase]]

    def at(self, name: str, lowest: bool = True) -> Phase:
        """The phase of the request named, at the lowest rate or the highest."""
        rates = [p.rate for _, p in self.phases]
        rate = min(rates) if lowest else max(rates)
        return next(p for s, p in self.phases if s.name == name and p.rate == rate)


def measure(args: argparse.Namespace) -> FeaturesFigures:
    rates = [float(r) for r in args.rates.split(",")]
    repo = args.repository.resolve()
    version = ensure_model(repo, args.arch)
    manifest = load_manifest(repo, version)
    with tempfile.TemporaryDirectory(prefix="bench-features-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        redis, redis_url = redis_process(work)
        stack.enter_context(running(redis))
        triton = stack.enter_context(TritonServer(repo, triton_ports(), work / "triton"))
        values = bench_settings(args.data_dir.resolve(), triton.url, repo, redis_url)
        store, _ = ensure_store(
            Settings(**values),
            version,
            manifest.embedding_dim,
            args.photos,
            args.clusters,
            args.rebuild,
        )
        store.close()  # the API process owns the store from here on
        pool = ApiSettings().facet_pool if args.facet_pool is None else args.facet_pool
        with api(values | {"api": {"facet_pool": pool}}, work / "api.log") as url:
            phases = asyncio.run(run_all(url, rates, args.seconds))
    return FeaturesFigures(manifest.arch, pool, phases)


def report(args: argparse.Namespace, f: FeaturesFigures) -> str:
    return "\n".join(
        [
            "",
            ran(),
            f"command: {command('loadtests.bench_features')}",
            "",
            f"Open loop, {args.seconds:g} s a phase, against {args.photos} photos ({f.arch}), "
            f"facets over a pool of {f.pool}; every text search's embedding cached; ms from each "
            "request's scheduled time; API stages: medians of its Server-Timing.",
            "",
            table(f.phases),
        ]
    )


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def p50(name: str, spec: str, about: str) -> Figure[FeaturesFigures]:
    def context(f: FeaturesFigures) -> str:
        low, high = f.at(spec), f.at(spec, lowest=False)
        return (
            f"{about}, at {low.rate:g}/s; at {high.rate:g}/s p50 {high.ms(50):.1f} ms, "
            f"{high.errors} errors of {len(high.outcomes)}"
        )

    return Figure(name, "ms", lambda f: f.at(spec).ms(50), context)


FIGURES = [
    p50("hybrid search p50", "hybrid (plain)", "every query's embedding cached, open loop"),
    p50(
        "hybrid search with boosts p50",
        "hybrid + boosts (recency, popularity)",
        "boost_recency and boost_popularity 0.01",
    ),
    p50(
        "hybrid search with facets p50",
        "hybrid + facets (6 fields)",
        "the six facets a first page asks for, over the default pool",
    ),
    p50(
        "suggest request p50",
        "suggest (prefixes of popular queries)",
        "prefixes of queries three sessions searched",
    ),
]


def main() -> None:
    args = parser().parse_args()
    print(report(args, measure(args)))


if __name__ == "__main__":
    main()
