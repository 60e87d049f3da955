"""Benchmark the worker's CPU side of indexing: read, decode and preprocess one photo to CLIP's
224x224 input, per core, by photo size. On GPU nodes this, not the image encoder, sizes the
worker fleet: the capacity plan (docs/capacity-plan.md) divides by it.

    python -m loadtests.bench_decode [--count 64] [--seconds 5]

Prints a Markdown table: ms per photo on one core, photos/s on one core and on every core of
this machine (one process per core). No thresholds: machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from core.embedding.images import prepare_image
from core.embedding.manifest import ImagePreprocessing
from harness.photos import sized
from loadtests.registry import Figure

# ViT-B-32's eval transform, as the exporter writes it into the manifest.
SPEC = ImagePreprocessing(
    size=224,
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
)
# A web-sized JPEG, what bench_indexer uses, and a camera original as stock sites store them.
SIZES = {"1.2 MP (1280x960)": (1280, 960), "12 MP (4000x3000)": (4000, 3000)}


def rate(data: list[bytes], seconds: float) -> float:
    """Photos prepared per second on one core, over at least `seconds`."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for item in data:
            prepare_image(item, SPEC)
        done += len(data)
    return done / (time.perf_counter() - start)


@dataclass
class DecodeRow:
    """One photo size: its mean compressed size and photos prepared per second."""

    label: str
    megabytes: float
    one_core: float
    all_cores: float

    @property
    def ms_per_photo(self) -> float:
        return 1000 / self.one_core


@dataclass
class DecodeFigures:
    cores: int
    rows: list[DecodeRow]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=32, help="distinct photos per size")
    parser.add_argument("--seconds", type=float, default=5.0)
    return parser


def measure(args: argparse.Namespace) -> DecodeFigures:
    cores = os.cpu_count() or 1
    rows = []
    for label, size in SIZES.items():
        with tempfile.TemporaryDirectory() as originals:
            data = sized(Path(originals), args.count, size)
        megabytes = sum(map(len, data)) / len(data) / 1e6
        one = rate(data, args.seconds)
        with ProcessPoolExecutor(cores) as pool:
            every = sum(pool.map(rate, [data] * cores, [args.seconds] * cores))
        rows.append(DecodeRow(label, megabytes, one, every))
    return DecodeFigures(cores, rows)


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def per_core(label: str) -> Figure[DecodeFigures]:
    def row(f: DecodeFigures) -> DecodeRow:
        return next(r for r in f.rows if r.label == label)

    return Figure(
        f"decode + preprocess, {label} JPEG",
        "photos/s per core",
        lambda f: row(f).one_core,
        lambda f: (
            f"{row(f).ms_per_photo:.1f} ms a photo ({row(f).megabytes:.2f} MB); "
            f"{row(f).all_cores:.0f}/s on all {f.cores} cores"
        ),
    )


FIGURES: list[Figure[DecodeFigures]] = [per_core(label) for label in SIZES]


def main() -> None:
    figures = measure(parser().parse_args())
    print(f"cores: {figures.cores}\n")
    print("| photo | MB | ms per photo (1 core) | photos/s, 1 core | photos/s, all cores |")
    print("|---|---|---|---|---|")
    for row in figures.rows:
        print(
            f"| {row.label} | {row.megabytes:.2f} | {row.ms_per_photo:.1f} | {row.one_core:.0f} "
            f"| {row.all_cores:.0f} |"
        )


if __name__ == "__main__":
    main()
