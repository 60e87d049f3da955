"""Benchmark an interleaved experiment's cost: text search latency with an experiment running
against without, at fixed arrival rates (issue 34: 2/s and 100/s).

    python -m loadtests.bench_experiment [--photos 20000] [--rates 2,100] [--shares 0.05,1]

The real `photosearch api serve` runs beside a real Triton serving two model versions: the
exported one (--repository, ViT-B-32 random weights by default) and a copy of it as the next
version, so that the candidate's query embedding is a second Triton call as a new model's
would be (same architecture, same cost). The live collection holds --photos points of the
first version, the candidate the same points as the second. Each rate runs a phase without
an experiment, then one per share with an experiment running (started in Redis, as
`photosearch experiment start` does), every query new (uncached), OPEN LOOP (loadtests/
openloop.py). Prints one Markdown table; no thresholds (machines are noisy). The model copy
lives in a temporary folder (the ONNX files hard-linked), the built store in --data-dir.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

from redis import Redis

from core.embedding.manifest import list_versions, load_manifest, write_manifest
from core.experiments import end, start
from core.settings import Settings
from core.vectorstore import VectorStore, collection_name
from harness.models import WORK, ensure_model
from harness.observe import Metrics, fetch_text
from harness.processes import own_redis
from harness.store import ensure_store, fill_store, store_arguments
from harness.vocabulary import Queries
from loadtests.openloop import OPERATOR_KEY, Phase, keep_alive, run_phase, search_target
from loadtests.startup import api_beside_triton, api_environment
from model.repository import MODELS, version_dir, write_configs
from model.triton_config import BatchingOptions

CONNECTIONS = 256
LINKED_BYTES = 1 << 20  # files above this are hard-linked into the copy (the ONNX weights)
EXPERIMENTS = "photosearch_experiment_searches_total"


def _copy(src: str, dst: str) -> object:
    """Hard-link the big files (never written), copy the rest (configs are rewritten)."""
    if os.path.getsize(src) > LINKED_BYTES:
        os.link(src, dst)
        return dst
    return shutil.copy2(src, dst)


def repository_with_twin(source: Path, version: int, folder: Path) -> tuple[Path, int]:
    """A copy of `source` with `version` served again as the next version: its twin."""
    repo = folder / "models"
    shutil.copytree(source, repo, copy_function=_copy)
    twin = list_versions(repo)[-1] + 1
    for name in MODELS:
        shutil.copytree(
            version_dir(repo, name, version), version_dir(repo, name, twin), copy_function=_copy
        )
    write_manifest(repo, load_manifest(repo, version).model_copy(update={"version": twin}))
    write_configs(repo, "cpu", BatchingOptions())
    return repo, twin


def ensure_candidate(store: VectorStore, twin: int, dim: int, photos: int, clusters: int) -> str:
    """The candidate collection: the live one's points, as the twin version's."""
    name = collection_name(twin, "bench")
    if store.has_collection(name) and store.count(name) == photos:
        return name
    if store.has_collection(name):
        store.drop_collection(name)
    print(f"building the candidate: {photos} photos as version {twin} ...", flush=True)
    store.create_collection(name, dim)
    fill_store(store, name, dim, photos, clusters, twin)
    store.optimize(name)
    return name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    store_arguments(p)
    p.set_defaults(data_dir=WORK / "experiment", photos=20_000, clusters=200)
    p.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    p.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[2.0, 100.0])
    p.add_argument(
        "--shares",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.05, 1.0],
        help="experiment shares measured at each rate (1: every search interleaved)",
    )
    p.add_argument("--redis-url", help="the API's Redis [a Redis of its own, for the run]")
    return p


def row(rate: float, share: float | None, phase: Phase, interleaved: float) -> str:
    label = "none" if share is None else f"{share:g}"
    return (
        f"| {rate:g} | {label} | {phase.ms(50):.1f} | {phase.ms(95):.1f} | {phase.ms(99):.1f} | "
        f"{phase.errors} | {interleaved:.0f} |"
    )


async def load(
    url: str,
    metrics_url: str,
    redis: Redis,
    prefix: str,
    args: argparse.Namespace,
    live: str,
    candidate: str,
) -> list[str]:
    queries = Queries(seed=0)
    rows = []
    async with keep_alive(url, CONNECTIONS, {"X-API-Key": OPERATOR_KEY}) as http:
        await run_phase(http, None, "warm-up", 10, [search_target(q) for q in queries.take(30)])
        for rate in args.rates:
            for share in (None, *args.shares):
                experiment = None
                if share is not None:
                    experiment = start(redis, prefix, live=live, candidate=candidate, share=share)
                    await asyncio.sleep(2.0)  # every replica reads it within alias_cache_s
                before = Metrics(await asyncio.to_thread(fetch_text, metrics_url))
                count = max(1, round(rate * args.seconds))
                name = f"{rate:g}/s, share {share}"
                print(f"{name} for {args.seconds:g} s ...", flush=True)
                targets = [search_target(q) for q in queries.take(count)]
                phase = await run_phase(http, None, name, rate, targets)
                after = Metrics(await asyncio.to_thread(fetch_text, metrics_url))
                done = after(EXPERIMENTS, outcome="interleaved") - before(
                    EXPERIMENTS, outcome="interleaved"
                )
                rows.append(row(rate, share, phase, done))
                if experiment is not None:
                    end(redis, prefix, experiment.id, "drop", by="admin")
                    await asyncio.sleep(2.0)
    return rows


def main() -> None:
    args = parser().parse_args()
    prefix = api_environment("experiment", args.data_dir.resolve())
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        source = args.repository.resolve()
        version = ensure_model(source, args.arch)
        repo, twin = repository_with_twin(source, version, work)
        os.environ["PHOTOSEARCH_MODEL__REPOSITORY"] = str(repo)
        settings = Settings()
        dim = load_manifest(repo, version).embedding_dim
        store, live = ensure_store(settings, version, dim, args.photos, args.clusters, False)
        try:
            candidate = ensure_candidate(store, twin, dim, args.photos, args.clusters)
        finally:
            store.close()  # the API process owns the store from here on
        redis_url = own_redis(stack, work, args.redis_url, prefix)
        redis = stack.enter_context(Redis.from_url(redis_url))
        with api_beside_triton(repo, work, redis_url, "warning") as served:
            rows = asyncio.run(
                load(
                    served.url,
                    served.metrics,
                    redis,
                    prefix,
                    args,
                    live,
                    candidate,
                )
            )
    print(f"\nuncached text searches, {args.photos} photos, {args.seconds:g} s a phase\n")
    print("| rate /s | share | p50 ms | p95 ms | p99 ms | errors | interleaved |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
