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
import time
from concurrent.futures import ProcessPoolExecutor

from photosearch.embedding.images import prepare_image
from photosearch.embedding.manifest import ImagePreprocessing
from tests.images import encode
from tests.indexing import variant

# ViT-B-32's eval transform, as the exporter writes it into the manifest.
SPEC = ImagePreprocessing(
    size=224,
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
)
# A web-sized JPEG, what bench_indexer uses, and a camera original as stock sites store them.
SIZES = {"1.2 MP (1280x960)": (1280, 960), "12 MP (4000x3000)": (4000, 3000)}


def photos(size: tuple[int, int], count: int) -> list[bytes]:
    return [encode(variant(i, size=960).resize(size), "JPEG", quality=90) for i in range(count)]


def rate(data: list[bytes], seconds: float) -> float:
    """Photos prepared per second on one core, over at least `seconds`."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for item in data:
            prepare_image(item, SPEC)
        done += len(data)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=32, help="distinct photos per size")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"cores: {cores}\n")
    print("| photo | MB | ms per photo (1 core) | photos/s, 1 core | photos/s, all cores |")
    print("|---|---|---|---|---|")
    for label, size in SIZES.items():
        data = photos(size, args.count)
        megabytes = sum(map(len, data)) / len(data) / 1e6
        one = rate(data, args.seconds)
        with ProcessPoolExecutor(cores) as pool:
            every = sum(pool.map(rate, [data] * cores, [args.seconds] * cores))
        print(f"| {label} | {megabytes:.2f} | {1000 / one:.1f} | {one:.0f} | {every:.0f} |")


if __name__ == "__main__":
    main()
