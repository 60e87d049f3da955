"""Benchmark the precisions of one model on this machine: fp32, int8, fp16 of the same weights.

    python -m loadtests.bench_precision [--arch ViT-B-32] [--precisions fp32,int8,fp16]
                                        [--repository DIR] [--seconds 2]

Exports the model once per precision (random weights unless --repository holds versions
already: one per precision is reused), then times each version's encoders in onnxruntime as
Triton's python backend runs them: the image encoder at batches of 1 to 32 (its best quoted),
text queries one at a time and in batches of 8 (padded to their longest). Beside the speeds,
the quality the export measured against fp32. Prints a Markdown table; no thresholds.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.embedding.arrays import AnyArray
from core.embedding.manifest import (
    IMAGE_MODEL,
    PRECISIONS,
    TEXT_MODEL,
    Precision,
    VariantQuality,
    list_versions,
    load_manifest,
)
from core.embedding.tokenizer import load_tokenizer, pad_for
from harness.machine import commit, machine
from loadtests.encoders import QUERIES, encoder, throughput
from model.precision import PrecisionOptions

IMAGE_BATCHES = (1, 8, 16, 32)


@dataclass
class PrecisionFigures:
    """One version's speeds (items/s) and the quality its export measured."""

    precision: Precision
    version: int
    image_per_s: dict[int, float]  # by batch size
    text_single_per_s: float
    text_batch8_per_s: float
    quality: VariantQuality | None

    @property
    def image_best(self) -> tuple[int, float]:
        batch = max(self.image_per_s, key=lambda b: self.image_per_s[b])
        return batch, self.image_per_s[batch]


def time_version(repo: Path, version: int, seconds: float, threads: int) -> PrecisionFigures:
    manifest = load_manifest(repo, version)
    tokenizer = load_tokenizer(repo, version)
    ids = tokenizer.encode_batch(QUERIES)
    text = encoder(repo, TEXT_MODEL, version, threads, served=True)
    singles = [pad_for(manifest.tokenizer, [row], 1) for row in ids]
    eights = [pad_for(manifest.tokenizer, ids[i : i + 8], 1) for i in range(0, len(ids), 8)]

    def run_text(batch: AnyArray) -> object:
        return text.run(None, {"input_ids": batch})

    single = throughput(run_text, singles, 1, seconds)
    batched = throughput(run_text, eights, 8, seconds)
    image = encoder(repo, IMAGE_MODEL, version, threads, served=True)
    size = manifest.image.size
    rng = np.random.default_rng(0)
    per_batch = {}
    for batch in IMAGE_BATCHES:
        pixels = rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
        per_batch[batch] = throughput(
            lambda p: image.run(None, {"image": p}), [pixels], batch, seconds
        )
    return PrecisionFigures(
        manifest.precision, version, per_batch, single, batched, manifest.quality
    )


def ensure_versions(repo: Path, arch: str, precisions: list[Precision]) -> dict[Precision, int]:
    """One version per precision: the newest already there, else exported now."""
    from model.export import export_model

    versions = list_versions(repo) if repo.exists() else []
    manifests = [load_manifest(repo, v) for v in versions]
    # Only a version whose two encoders both serve its precision: one with an encoder fallen
    # back to fp32 (up's default, --fallback) would time fp32 under another name.
    have = {
        m.precision: m.version
        for m in manifests
        if m.image_precision == m.text_precision == m.precision
    }
    for precision in precisions:
        if precision not in have:
            print(f"exporting {arch} {precision} (random weights) ...", flush=True)
            manifest = export_model(arch, "none", repo, precision=PrecisionOptions(precision))
            have[precision] = manifest.version
    return {p: have[p] for p in precisions}


def report(figures: list[PrecisionFigures], arch: str, threads: int) -> str:
    base = next((f for f in figures if f.precision == "fp32"), None)

    def cell(f: PrecisionFigures, value: float, of_base: float | None) -> str:
        return f"{value:.1f}" + (f" ({value / of_base:.2f}x)" if of_base and f is not base else "")

    lines = [
        f"{arch}, random weights, {machine()}, onnxruntime {ort.__version__} "
        f"({threads or 'all'} threads), commit {commit()}",
        "",
        "| precision | image /s at best batch | text /s one at a time | text /s batches of 8 "
        "| mean cosine image / text | top-10 overlap | copies found first |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        batch, best = f.image_best
        q = f.quality
        cosines, overlap, copies = (
            (
                f"{q.image_cosine_mean:.5f} / {q.text_cosine_mean:.5f}",
                f"{q.top10_overlap:.3f}",
                f"{q.copies_found_first:.3f} (fp32 {q.copies_found_first_fp32:.3f})",
            )
            if q
            else ("1 (reference)", "1", "-")
        )
        image = cell(f, best, base.image_best[1] if base else None)
        single = cell(f, f.text_single_per_s, base.text_single_per_s if base else None)
        eight = cell(f, f.text_batch8_per_s, base.text_batch8_per_s if base else None)
        lines.append(
            f"| {f.precision} | {image} at b{batch} | {single} | {eight} "
            f"| {cosines} | {overlap} | {copies} |"
        )
    lines.append("")
    lines.append(
        "image /s by batch: "
        + "; ".join(
            f"{f.precision} " + ", ".join(f"b{b} {v:.1f}" for b, v in f.image_per_s.items())
            for f in figures
        )
    )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="ViT-B-32")
    parser.add_argument("--precisions", type=precision_list, default="fp32,int8,fp16")
    parser.add_argument("--repository", type=Path, help="kept between runs (default: temporary)")
    parser.add_argument("--seconds", type=float, default=2.0, help="per repetition")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime's; 0: all cores")
    return parser


def precision_list(text: str) -> list[Precision]:
    """--precisions' value: names of PRECISIONS, comma-separated."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in PRECISIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{unknown}: the precisions are {PRECISIONS}")
    return [p for name in names for p in PRECISIONS if p == name]


def main() -> None:
    args = parser().parse_args()
    precisions: list[Precision] = args.precisions
    with tempfile.TemporaryDirectory() as tmp:
        repo = args.repository or Path(tmp) / "models"
        versions = ensure_versions(repo, args.arch, precisions)
        figures = []
        for precision, version in versions.items():
            print(f"timing {precision} (version {version}) ...", flush=True)
            figures.append(time_version(repo, version, args.seconds, args.threads))
        print(report(figures, load_manifest(repo, versions[precisions[0]]).arch, args.threads))


if __name__ == "__main__":
    main()
