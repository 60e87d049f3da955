"""Benchmark what the visual attributes add to the indexer's decode: per photo, prepare_image
(decode and preprocess to CLIP's input, what the indexer did before) against prepare_photo
(the same decode, and the colours, size and orientation of core/embedding/attributes.py).

    python -m loadtests.bench_attributes [--sizes 3000x2000,1200x800] [--count 8] [--decodes 400]

The photos are synthetic JPEGs at camera and web sizes: a gradient, a few coloured shapes and
Gaussian noise (quality 90), so the decoder and the colour classes see photo-like pixels.
Each photo is decoded both ways in turn, the order alternating, so that the machine's load
falls on both alike; `--decodes` decodes of each way per size. Prints a Markdown table: mean
and median microseconds per photo, the attributes' own cost (the difference of the means) and
its share of decoding alone. No thresholds: machines are noisy.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from PIL import Image, ImageDraw

from core.embedding.attributes import visual_attributes
from core.embedding.images import prepare_image, prepare_photo
from core.embedding.manifest import ImagePreprocessing
from loadtests.registry import Figure

# ViT-B-32's eval transform, as the exporter writes it into the manifest (bench_decode's).
SPEC = ImagePreprocessing(
    size=224,
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
)
SEED = 35


def synthetic_jpeg(size: tuple[int, int], rng: np.random.Generator) -> bytes:
    """A photo-like JPEG: a vertical gradient between two colours, shapes, noise (sigma 12)."""
    width, height = size
    top, bottom = rng.integers(0, 256, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    pixels = np.broadcast_to(top + (bottom - top) * ramp, (height, width, 3)).copy()
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 6))):
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = int(rng.integers(min(size) // 10, min(size) // 3))
        fill = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)
    noisy = np.asarray(image, dtype=np.float32) + rng.normal(0, 12, size=(height, width, 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    work()
    return (time.perf_counter_ns() - start) / 1000


@dataclass
class AttributesRow:
    """One photo size: microseconds per photo of each way, over the same decodes."""

    label: str
    megabytes: float
    decode_us: list[float]
    with_attributes_us: list[float]

    @property
    def decode_mean(self) -> float:
        return statistics.fmean(self.decode_us)

    @property
    def with_attributes_mean(self) -> float:
        return statistics.fmean(self.with_attributes_us)

    @property
    def attributes_us(self) -> float:
        return self.with_attributes_mean - self.decode_mean

    @property
    def share(self) -> float:
        """The attributes' cost as a share of decoding alone."""
        return self.attributes_us / self.decode_mean


def parse_size(text: str) -> tuple[int, int]:
    width, _, height = text.partition("x")
    return int(width), int(height)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="3000x2000,1200x800", help="WxH,... of the photos")
    p.add_argument("--count", type=int, default=8, help="distinct photos per size")
    p.add_argument("--decodes", type=int, default=400, help="decodes of each way per size")
    return p


def measure(args: argparse.Namespace) -> list[AttributesRow]:
    rng = np.random.default_rng(SEED)
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        photos = [synthetic_jpeg(size, rng) for _ in range(args.count)]
        for data in photos:  # warm: Pillow's decoder, the attributes' lookup table
            prepare_photo(data, SPEC)
        row = AttributesRow(
            f"{size[0]}x{size[1]}", sum(map(len, photos)) / len(photos) / 1e6, [], []
        )
        for n in range(args.decodes):
            data = photos[n % len(photos)]
            alone, both = partial(prepare_image, data, SPEC), partial(prepare_photo, data, SPEC)
            if n % 2:
                row.with_attributes_us.append(timed(both))
                row.decode_us.append(timed(alone))
            else:
                row.decode_us.append(timed(alone))
                row.with_attributes_us.append(timed(both))
        rows.append(row)
    return rows


def attributes_alone_us(repeats: int = 200) -> float:
    """visual_attributes on a 336x224 image (the encoder's resized image of a 3:2 photo)."""
    image = Image.fromarray(
        np.random.default_rng(SEED).integers(0, 256, size=(224, 336, 3), dtype=np.uint8)
    )
    visual_attributes(image, (3000, 2000))
    return statistics.median(
        timed(lambda: visual_attributes(image, (3000, 2000))) for _ in range(repeats)
    )


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def size_figure(name: str, which: int) -> Figure[list[AttributesRow]]:
    """The first size of --sizes is a camera's, the last a web page's. The value is the decode
    with the attributes (the difference of two means may come out below 0 on a busy machine)."""

    def context(rows: list[AttributesRow]) -> str:
        r = rows[which]
        return (
            f"{r.label} JPEG, {len(r.decode_us)} decodes each way: decode alone "
            f"{r.decode_mean:.0f} µs, so the attributes {r.attributes_us:.0f} µs "
            f"({100 * r.share:.1f}% of the decode)"
        )

    return Figure(name, "µs", lambda rows: rows[which].with_attributes_mean, context)


FIGURES = [
    size_figure("decode + attributes, camera-size photo", 0),
    size_figure("decode + attributes, web-size photo", -1),
]


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    rows = measure(args)
    print(f"{args.decodes} decodes of each way per size, {args.count} distinct photos\n")
    print(
        "| photo | MB | decode alone, mean µs | decode + attributes, mean µs | "
        "median µs (alone / with) | attributes, µs | share of decode |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.label} JPEG | {r.megabytes:.2f} | {r.decode_mean:.0f} | "
            f"{r.with_attributes_mean:.0f} | {statistics.median(r.decode_us):.0f} / "
            f"{statistics.median(r.with_attributes_us):.0f} | {r.attributes_us:.0f} | "
            f"{100 * r.share:.1f}% |"
        )
    print(f"\nvisual_attributes alone on a 336x224 image: {attributes_alone_us():.0f} µs (median)")


if __name__ == "__main__":
    main()
