"""Calibrate the near-duplicate threshold (PHOTOSEARCH_INDEXER__DUPLICATE_THRESHOLD): the demo
photos and altered copies of each, embedded through Triton as the indexer embeds them.

    python -m loadtests.bench_duplicates [--arch ViT-B-32] [--repository DIR] [--photos 20]
                                         [--thresholds 0.80:0.99:0.01] [--triton-url HOST:PORT]

Each photo is altered the way re-uploads are (crops, JPEG re-encoding, a mirror image,
downscales, a small rotation, brighter), each copy encoded to a file and decoded by the
indexer's own path. Over every pair of images, a pair of one photo's images (the photo and a
copy, or two copies) is positive and a pair across photos negative; at each threshold the
tables give the precision and recall of "cosine at or above it", per alteration too, and the
groups the indexer's greedy assignment (indexer/photo/duplicates.py) makes of the images written in
a shuffled order. The chosen threshold is the lowest at which that grouping puts no two
different photos in one group (so search never hides a distinct photo behind another), or,
where none does, the highest F1 of the grouping's pairs. No thresholds: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from core.embedding.arrays import AnyArray, Embeddings
from core.embedding.client import EmbeddingClient
from core.embedding.images import prepare_image
from core.embedding.manifest import load_manifest
from harness.machine import commit, machine
from harness.models import default_repository, ensure_model
from harness.photos import ALTERATIONS
from harness.processes import triton_ports
from indexer.photo.duplicates import assign
from model.calibration import photo_files
from model.triton_server import TritonServer

ORIGINAL = "original"
ORDER_SEED = 7  # the order the greedy grouping writes the images in: a fixed shuffle


def altered_copies(data: bytes) -> dict[str, bytes]:
    """A photo's file and its altered copies' files, by kind."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return {ORIGINAL: data} | {kind: alter(image) for kind, alter in ALTERATIONS.items()}


@dataclass(frozen=True)
class Sample:
    """Every image: its name, its photo (family) and kind, and its embedding."""

    names: list[str]  # "<photo>/<kind>"
    family: AnyArray  # int [N]
    kinds: list[str]
    vectors: Embeddings  # float32 [N, D], unit rows
    photos: list[str]

    def cosines(self) -> AnyArray:
        return np.asarray(self.vectors @ self.vectors.T, dtype=np.float64)


async def _embed(url: str, repo: Path, version: int, pixels: AnyArray) -> Embeddings:
    async with EmbeddingClient(url, repo, image_timeout_s=600) as client:
        return await client.encode_images(pixels, model_version=version)


def embed_sample(repo: Path, version: int, url: str, files: Sequence[Path]) -> Sample:
    spec = load_manifest(repo, version).image
    names, family, kinds, pixels, photos = [], [], [], [], []
    for row, path in enumerate(files):
        photos.append(path.stem)
        for kind, data in altered_copies(path.read_bytes()).items():
            names.append(f"{path.stem}/{kind}")
            family.append(row)
            kinds.append(kind)
            pixels.append(prepare_image(data, spec))  # the indexer's decode and preprocessing
    vectors = asyncio.run(_embed(url, repo, version, np.stack(pixels)))
    return Sample(names, np.array(family), kinds, vectors, photos)


@dataclass(frozen=True)
class Counts:
    """Pairs called the same (cosine at or above the threshold, or one group) that are (tp)
    and are not (fp), and same-photo pairs not called so (fn)."""

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def counts(called: AnyArray, positive: AnyArray, pairs: AnyArray) -> Counts:
    """Counts over the pairs selected by the boolean matrix `pairs`."""
    return Counts(
        int((called & positive & pairs).sum()),
        int((called & ~positive & pairs).sum()),
        int((~called & positive & pairs).sum()),
    )


@dataclass(frozen=True)
class Grouped:
    """What the indexer's greedy assignment made of the sample at one threshold."""

    groups: int
    whole: int  # photos whose images all landed in one group
    mixed: int  # groups holding images of two or more photos
    pairs: Counts  # "same group" over the pairs


@dataclass(frozen=True)
class Row:
    threshold: float
    pairs: Counts  # every pair, cosine >= threshold
    by_kind: dict[str, Counts]  # the kind's copies against every original
    grouped: Grouped


def grouping(sample: Sample, threshold: float, order: AnyArray) -> Grouped:
    """The indexer's assignment over the images written one after another in `order` (one
    batch: each image then sees every image written before it, as batches with an exact
    nearest-neighbour search would)."""
    ids = [sample.names[i] for i in order]
    labels = assign(ids, sample.vectors[order], [None] * len(ids), threshold).labels
    label_of = dict(zip(ids, labels, strict=True))
    label = np.array([label_of[name] for name in sample.names])
    families = {int(f) for f in sample.family}
    whole = sum(len(set(label[sample.family == f])) == 1 for f in families)
    mixed = sum(len(set(sample.family[label == g])) > 1 for g in set(label))
    same = label[:, None] == label[None, :]
    positive = sample.family[:, None] == sample.family[None, :]
    upper = np.triu(np.ones_like(positive), k=1)
    return Grouped(len(set(label)), whole, mixed, counts(same, positive, upper))


def measure_sample(sample: Sample, thresholds: Sequence[float]) -> list[Row]:
    cosines = sample.cosines()
    positive = sample.family[:, None] == sample.family[None, :]
    upper = np.triu(np.ones_like(positive), k=1)
    kinds = np.array(sample.kinds)
    originals = kinds == ORIGINAL
    order = np.random.default_rng(ORDER_SEED).permutation(len(sample.names))
    rows = []
    for t in thresholds:
        called = cosines >= t
        by_kind = {
            kind: counts(called, positive, np.outer(kinds == kind, originals))
            for kind in ALTERATIONS
        }
        rows.append(Row(t, counts(called, positive, upper), by_kind, grouping(sample, t, order)))
    return rows


def choose(rows: Sequence[Row]) -> tuple[float, str]:
    """The threshold and the rule that chose it (see the module's docstring)."""
    clean = [r for r in rows if r.grouped.mixed == 0]
    if clean:
        return min(r.threshold for r in clean), "lowest with no group of two photos"
    best = max(rows, key=lambda r: (r.grouped.pairs.f1, r.threshold))
    return best.threshold, "no threshold kept every photo apart: best F1 of the grouping"


def extremes(sample: Sample) -> list[str]:
    """The lowest cosine of each kind to its original, and the closest different photos."""
    cosines = sample.cosines()
    kinds = np.array(sample.kinds)
    original_of = {int(sample.family[i]): i for i in np.flatnonzero(kinds == ORIGINAL)}
    lines = []
    for kind in ALTERATIONS:
        scores = sorted(
            (float(cosines[i, original_of[int(sample.family[i])]]), sample.names[i])
            for i in np.flatnonzero(kinds == kind)
        )
        lines.append(
            f"{kind}: lowest {scores[0][0]:.4f} ({scores[0][1]}), median "
            f"{np.median([s for s, _ in scores]):.4f}"
        )
    different = sample.family[:, None] != sample.family[None, :]
    masked = np.where(np.triu(different, k=1), cosines, -np.inf)
    for flat in np.argsort(masked, axis=None)[::-1][:3]:
        i, j = np.unravel_index(flat, masked.shape)
        lines.append(
            f"different photos: {masked[i, j]:.4f} ({sample.names[i]} / {sample.names[j]})"
        )
    return lines


def shown(threshold: float) -> str:
    """Two decimals, or as many as the threshold has."""
    return f"{threshold:.2f}" if round(threshold, 2) == threshold else f"{threshold:g}"


def report(sample: Sample, rows: Sequence[Row], arch: str, weights: str) -> str:
    chosen, rule = choose(rows)
    n = len(sample.names)
    lines = [
        f"{arch} ({weights}), {machine()}, commit {commit()}",
        f"{len(sample.photos)} photos x (original + {len(ALTERATIONS)} copies) = {n} images, "
        f"{n * (n - 1) // 2} pairs",
        "",
        "Pairs: cosine at or above the threshold",
        "",
        "| threshold | precision | recall | F1 | different photos paired | copies missed |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r.pairs
        lines.append(
            f"| {shown(r.threshold)} | {p.precision:.3f} | {p.recall:.3f} | {p.f1:.3f} "
            f"| {p.fp} | {p.fn} |"
        )
    kinds = list(ALTERATIONS)
    lines += [
        "",
        "Per alteration: recall of (original, copy); precision of the copy against every original",
        "",
        "| threshold | " + " | ".join(kinds) + " |",
        "|---:|" + "---:|" * len(kinds),
    ]
    for r in rows:
        cells = [f"{r.by_kind[k].recall:.2f} / {r.by_kind[k].precision:.2f}" for k in kinds]
        lines.append(f"| {shown(r.threshold)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"The indexer's greedy grouping (indexer/photo/duplicates.py), images written in a "
        f"shuffled order (seed {ORDER_SEED}); {len(sample.photos)} photos",
        "",
        "| threshold | groups | photos whole | groups of 2+ photos | pair precision "
        "| pair recall | F1 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        g = r.grouped
        lines.append(
            f"| {shown(r.threshold)} | {g.groups} | {g.whole} | {g.mixed} "
            f"| {g.pairs.precision:.3f} | {g.pairs.recall:.3f} | {g.pairs.f1:.3f} |"
        )
    lines += ["", *extremes(sample), "", f"chosen threshold: {shown(chosen)} ({rule})"]
    return "\n".join(lines)


def threshold_list(text: str) -> list[float]:
    """--thresholds: FROM:TO:STEP (inclusive) or a comma-separated list."""
    if ":" in text:
        start, stop, step = (float(x) for x in text.split(":"))
        count = round((stop - start) / step) + 1
        return [round(start + i * step, 6) for i in range(count)]
    return [float(x) for x in text.split(",")]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="ViT-B-32", help="exported when --repository is empty")
    parser.add_argument("--repository", type=Path, default=default_repository())
    parser.add_argument("--photos", type=int, default=20, help="demo photos (at most 20)")
    parser.add_argument("--thresholds", type=threshold_list, default="0.80:0.99:0.01")
    parser.add_argument("--triton-url", help="a running Triton serving --repository")
    parser.add_argument(
        "--weights",
        default="random weights: no pretrained weights can be downloaded here",
        help="what the report says of the model's weights",
    )
    return parser


@dataclass(frozen=True)
class DuplicateFigures:
    sample: Sample
    rows: list[Row]
    arch: str


def measure(args: argparse.Namespace) -> DuplicateFigures:
    repo = args.repository.resolve()
    version = ensure_model(repo, args.arch)
    files, _ = photo_files(None)
    files = files[: args.photos]
    with tempfile.TemporaryDirectory(prefix="bench-duplicates-") as tmp, ExitStack() as stack:
        url = args.triton_url
        if url is None:
            url = stack.enter_context(TritonServer(repo, triton_ports(), Path(tmp))).url
        print(f"embedding {len(files)} photos and their copies ...", flush=True)
        sample = embed_sample(repo, version, url, files)
    rows = measure_sample(sample, args.thresholds)
    return DuplicateFigures(sample, rows, load_manifest(repo, version).arch)


def main() -> None:
    args = parser().parse_args()
    figures = measure(args)
    print(report(figures.sample, figures.rows, figures.arch, args.weights))


if __name__ == "__main__":
    main()
