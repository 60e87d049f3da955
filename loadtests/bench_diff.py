"""Benchmark the nightly sync's diff: a 100,000-photo folder with 1% changed, against Qdrant Edge.

    python -m loadtests.bench_diff [--photos 100000] [--changed 0.01]

Prints the time of each step (list the folder, read the indexed versions, compare) and how
many photos the plan would embed; no thresholds (machines are noisy).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.catalog import read_catalog
from indexer.diff import plan_sync
from photosearch.settings import Settings
from photosearch.sources import LocalSource
from photosearch.vectorstore import PhotoPoint, VectorStore, collection_name, open_store

REPEATS = 3


def make_folder(root: Path, count: int) -> None:
    for i in range(count):
        folder = root / f"{i % 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"photo{i:06d}.jpg").write_bytes(i.to_bytes(4, "big"))


def index_everything(store: VectorStore, collection: str, root: Path, dim: int) -> None:
    rng = np.random.default_rng(0)
    objects = list(LocalSource(root).list())
    for start in range(0, len(objects), 1000):
        chunk = objects[start : start + 1000]
        vectors = rng.standard_normal((len(chunk), dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.upsert(
            collection,
            [
                PhotoPoint(
                    o.key, v, {"photo_id": o.key, "content_version": o.version, "meta_hash": ""}
                )
                for o, v in zip(chunk, vectors, strict=True)
            ],
        )


@dataclass
class DiffFigures:
    """The diff of `photos` with `changed` of them changed: seconds per step, best of REPEATS."""

    photos: int
    changed: int
    seconds: dict[str, float]  # list, versions, compare, total
    to_embed: int
    unchanged: int
    gone: int


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--photos", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--dim", type=int, default=512)
    return parser


def measure(args: argparse.Namespace) -> DiffFigures:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "photos"
        started = time.perf_counter()
        make_folder(root, args.photos)
        print(f"wrote {args.photos} files in {time.perf_counter() - started:.1f} s", flush=True)
        store = open_store(Settings(data_dir=Path(tmp)))  # the embedded default: Qdrant Edge
        collection = collection_name(1, "bench")
        store.create_collection(collection, args.dim)
        started = time.perf_counter()
        index_everything(store, collection, root, args.dim)
        print(f"indexed {store.count(collection)} points in {time.perf_counter() - started:.1f} s")

        changed = int(args.photos * args.changed)
        for i in range(0, args.photos, args.photos // changed)[:changed]:
            path = root / f"{i % 100:02d}" / f"photo{i:06d}.jpg"
            path.write_bytes(path.read_bytes() + b"!")  # new size, new version

        timings: dict[str, list[float]] = {"list": [], "versions": [], "compare": [], "total": []}
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            catalog = read_catalog(LocalSource(root), ("photos.jsonl", "photos.csv"))
            t1 = time.perf_counter()
            indexed = list(store.versions(collection))
            t2 = time.perf_counter()
            plan = plan_sync(catalog, indexed, {})
            t3 = time.perf_counter()
            for name, value in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                timings[name].append(value)
        store.close()
    return DiffFigures(
        args.photos,
        changed,
        {name: min(values) for name, values in timings.items()},
        len(plan.embed),
        plan.unchanged,
        len(plan.gone),
    )


def main() -> None:
    figures = measure(parser().parse_args())
    print("| step | best of 3, s |\n|---|---:|")
    for name, value in figures.seconds.items():
        print(f"| {name} | {value:.2f} |")
    print(
        f"\n{figures.photos} photos, {figures.changed} changed: the plan embeds "
        f"{figures.to_embed}, {figures.unchanged} unchanged, {figures.gone} gone"
    )


if __name__ == "__main__":
    main()
