"""What the scale and reindex benchmarks share: their options, and each size's synthetic
catalogue with a Runtime over a store of its own (bench_scale's planning, scale_reindex's
phases)."""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.settings import Settings
from core.vectorstore import open_store
from harness.photos import write_catalogue
from harness.processes import bench_settings
from indexer.runtime import Runtime

MB = 1 << 20


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="100000,1000000", help="catalogue sizes, comma-separated"
    )
    parser.add_argument("--shard-size", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-queued", type=int, default=8, help="max_queued_batches")
    parser.add_argument("--concurrency", type=int, default=2, help="the e2e worker's threads")
    parser.add_argument("--no-e2e", dest="e2e", action="store_false", help="planning only")
    parser.add_argument("--work", type=Path, help="a folder for the catalogues (default: temp)")
    reindex = parser.add_argument_group("--reindex: every phase of a reindex")
    reindex.add_argument("--reindex", action="store_true", help="measure a reindex's phases")
    reindex.add_argument("--changes", type=int, default=1000, help="changes the catch-up replays")
    reindex.add_argument("--drain", type=int, default=100, help="changes the switch replays")
    reindex.add_argument("--dim", type=int, default=512, help="the new model's vector size")
    reindex.add_argument(
        "--group-shards",
        type=int,
        default=0,
        help="group only this many shards and extrapolate the pass's time (0: every shard)",
    )
    reindex.add_argument(
        "--load-only-above",
        type=int,
        default=0,
        metavar="PHOTOS",
        help="stop larger sizes after the load: 1e6 x 512 takes most of an hour to index on 2 "
        "busy cores (0: every phase at every size)",
    )
    return parser


def catalogues(work: Path, sizes: str) -> Iterator[tuple[int, Path]]:
    """Each size of `sizes` (comma-separated) as a folder of that many small JPEGs, removed
    once the caller is done with it."""
    for photos in (int(n) for n in sizes.split(",")):
        root = work / f"photos{photos}"
        started = time.perf_counter()
        write_catalogue(root, photos)
        print(f"{photos} photos written in {time.perf_counter() - started:.0f} s", flush=True)
        yield photos, root
        shutil.rmtree(root)


@contextmanager
def runtime(
    data: Path, triton_url: str, repo: Path, redis_url: str, args: argparse.Namespace
) -> Iterator[Runtime]:
    """A Runtime with the benchmark's shards and batches, on a store of its own in `data`,
    which goes when it closes."""
    values = bench_settings(
        data,
        triton_url,
        repo,
        redis_url,
        shard_size=args.shard_size,
        batch_size=args.batch_size,
    )
    settings = Settings(**values)
    store = open_store(settings)
    rt = Runtime(settings, store=store)
    try:
        yield rt
    finally:
        rt.close()
        store.close()
        shutil.rmtree(data, ignore_errors=True)
