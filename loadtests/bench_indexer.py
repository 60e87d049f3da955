"""Benchmark indexing end to end (read + decode + Triton + upsert) against the raw image encoder.

    python -m loadtests.bench_indexer [--arch ViT-B-32] [--repository DIR] [--photos 384]

Real JPEGs of 1280x960 (1.2 megapixels) cut from the demo photographs; a real
`photosearch worker` process, Redis, Triton and the embedded Qdrant Edge store. Prints
images/s of both and the plan they imply for a full reindex of 1e8 photos; no thresholds.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from core.embedding.images import prepare_image
from core.embedding.manifest import IMAGE_MODEL, list_versions, load_manifest
from harness.photos import sized
from harness.processes import bench_settings, redis_process, running, sync_folder, triton_ports
from loadtests.encoders import REPEATS, encoder, throughput
from loadtests.registry import Figure
from model.triton_server import TritonServer

FULL_REINDEX = 100_000_000


def make_photos(root: Path, count: int) -> int:
    """count JPEGs of 1280x960 at quality 90; returns their total size in bytes."""
    root.mkdir(parents=True)
    photos = sized(root.parent / "originals", count, (1280, 960))
    for i, data in enumerate(photos):
        (root / f"photo{i:04d}.jpg").write_bytes(data)
    return sum(map(len, photos))


def raw_rate(repo: Path, version: int, photos: list[Path], seconds: float) -> dict[int, float]:
    """The image encoder alone in onnxruntime (all cores), by batch size: best of REPEATS."""
    manifest = load_manifest(repo, version)
    session = encoder(repo, IMAGE_MODEL, version, one_pool=False)
    pixels = np.stack([prepare_image(p.read_bytes(), manifest.image) for p in photos[:64]])
    run = partial(session.run, None)
    rates = {}
    for batch in (16, 32, 64):
        rates[batch] = throughput(lambda p: run({"image": p}), [pixels[:batch]], batch, seconds)
    return rates


def indexing_rate(
    repo: Path, photos: Path, work: Path, runs: int, batch_size: int, read_threads: int
) -> tuple[float, int]:
    """images/s of sync jobs over the folder, each into a fresh store: best of `runs`."""
    best, count = 0.0, 0
    redis, redis_url = redis_process(work)
    with running(redis), TritonServer(repo, triton_ports(), work / "triton") as server:
        for run in range(runs):
            values = bench_settings(
                work / f"data{run}", server.url, repo, redis_url, batch_size=batch_size
            )
            job = sync_folder(values, photos, work / f"worker{run}.log", timeout_s=1800)
            print(f"  run {run + 1}: {job.done} photos, {job.images_per_s:.1f} img/s", flush=True)
            best, count = max(best, job.images_per_s), job.done
    return best, count


@dataclass
class IndexerFigures:
    """images/s of the raw image encoder by batch size and of indexing end to end."""

    arch: str
    photos: int
    raw: dict[int, float]
    e2e: float
    count: int  # photos the last end-to-end run indexed
    batch_size: int
    runs: int

    @property
    def best_batch(self) -> int:
        return max(self.raw, key=lambda b: self.raw[b])

    @property
    def ratio(self) -> float:
        """End to end / the raw encoder at its best batch."""
        return self.e2e / self.raw[self.best_batch]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="ViT-B-32")
    parser.add_argument("--repository", type=Path, help="an exported repository (default: export)")
    parser.add_argument("--photos", type=int, default=384)
    parser.add_argument("--seconds", type=float, default=4.0, help="raw encoder, per repetition")
    parser.add_argument("--runs", type=int, default=2, help="end-to-end repetitions")
    parser.add_argument("--batch-size", type=int, default=64, help="photos per indexer task")
    parser.add_argument("--read-threads", type=int, default=8, help="decoding threads")
    parser.add_argument("--keep-repository", type=Path, help="export here and keep it")
    return parser


def measure(args: argparse.Namespace) -> IndexerFigures:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repo = args.repository
        if repo is None:
            from model.export import export_model

            repo = args.keep_repository or work / "models"
            print(f"exporting {args.arch} (random weights) ...", flush=True)
            export_model(args.arch, "none", repo)
        version = list_versions(repo)[-1]
        size = make_photos(work / "photos", args.photos)
        print(f"{args.photos} JPEGs 1280x960, {size / args.photos / 1024:.0f} KiB each", flush=True)
        print("raw image encoder ...", flush=True)
        raw = raw_rate(repo, version, sorted((work / "photos").iterdir()), args.seconds)
        print("end to end (worker + Triton + Qdrant Edge) ...", flush=True)
        e2e, count = indexing_rate(
            repo, work / "photos", work, args.runs, args.batch_size, args.read_threads
        )
        arch = load_manifest(repo, version).arch if args.repository else args.arch
    return IndexerFigures(arch, args.photos, raw, e2e, count, args.batch_size, args.runs)


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


FIGURES: list[Figure[IndexerFigures]] = [
    Figure(
        "raw image encoder",
        "img/s",
        lambda f: f.raw[f.best_batch],
        lambda f: (
            f"onnxruntime on all cores, best batch ({f.best_batch}) of "
            f"{', '.join(map(str, f.raw))}, best of {REPEATS}"
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


def main() -> None:
    figures = measure(parser().parse_args())
    raw, e2e = figures.raw, figures.e2e
    print(f"\n| {figures.arch} | images/s |")
    print("|---|---:|")
    for batch, rate in raw.items():
        print(f"| raw onnxruntime, batch {batch} | {rate:.1f} |")
    print(
        f"| end to end, {figures.count} photos, tasks of {figures.batch_size} "
        f"(best of {figures.runs}) | {e2e:.1f} |"
    )
    print(f"\nend to end / raw at its best batch ({figures.best_batch}): {figures.ratio:.1%}")
    hours = FULL_REINDEX / e2e / 3600
    print(
        f"full reindex of {FULL_REINDEX:.0e} photos at {e2e:.1f} images/s per worker: "
        f"{hours:,.0f} worker-hours; {hours / 48:,.0f} such workers finish in 48 h"
    )


if __name__ == "__main__":
    main()
