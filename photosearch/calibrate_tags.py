"""`photosearch model calibrate-tags`: fit one model version's tag rule to labelled photos.

The vocabulary is embedded by the version's own text graph (each tag the mean of its prompt
templates), the photos by its image graph (onnxruntime: no Triton), and every (threshold,
margin) of a grid drawn from the scores' own quantiles tags the photos as the indexer would
(core/tagging/rule.py). The pair with the best F1 against the labels (micro-averaged: every
photo's tags counted together) wins. Chance is a tagger that gives each photo as many tags,
drawn at random: its precision is the labels' base rate (true tags / (photos x vocabulary)),
and its recall and F1 fall by the same factor. A rule whose precision is under MIN_LIFT times
the base rate tags no better than chance: its calibration says enabled=False and why, and the
indexer stores no tags for that version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from core.embedding.arrays import AnyArray, Embeddings
from core.embedding.errors import InvalidImage
from core.embedding.images import decode_image, resize_and_crop
from core.embedding.manifest import (
    IMAGE_INPUT,
    IMAGE_MODEL,
    MAX_BATCH_SIZE,
    TEXT_INPUT,
    TEXT_MODEL,
    ModelManifest,
    SearchCalibration,
    TagCalibration,
    load_manifest,
    write_manifest,
)
from core.embedding.tokenizer import load_tokenizer, pad_for
from core.settings import Settings
from core.sources import open_source
from core.tagging.rule import MAX_TAGS, TagRule, auto_tags, tag_scores
from core.tagging.vocabulary import Vocabulary, embed_vocabulary, normalise
from indexer.plan.catalog import read_catalog
from model.precision import run_batches, session
from model.repository import version_dir

# The rule's precision must reach this multiple of the base rate to store tags at all.
MIN_LIFT = 2.0
MIN_PHOTOS = 20
# The grid: quantiles of the photos' cosines (threshold) and of their excess over each photo's
# mean (margin), denser towards the top where the few true tags of a large vocabulary lie.
QUANTILES = 1.0 - np.geomspace(0.5, 0.0005, 40)
NO_BOUND = -1.0  # a cosine is never below it: "no threshold" / "no margin" in the grid


class TagCalibrationError(RuntimeError):
    """The photos, labels or vocabulary cannot calibrate this version (nothing is written)."""


@dataclass(frozen=True)
class Scored:
    """One rule of the grid and how its tags compare with the labels."""

    rule: TagRule
    precision: float
    recall: float
    f1: float
    tags_per_photo: float


@dataclass(frozen=True)
class TagReport:
    """What calibrate-tags measured: the calibration to write and the grid's best rules."""

    calibration: TagCalibration
    best: list[Scored]
    photos: int


def read_labels(path: Path) -> dict[str, frozenset[str]]:
    """labels.tsv: `photo_id<TAB>tag,tag,...` a line; '#' lines and blank lines skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TagCalibrationError(f"cannot read the labels {path}: {exc}") from None
    truth: dict[str, frozenset[str]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        photo_id, tab, tags = line.partition("\t")
        if not tab or not photo_id:
            raise TagCalibrationError(f"{path}:{number}: not photo_id<TAB>tag,tag,...")
        truth[photo_id] = frozenset(filter(None, (normalise(t) for t in tags.split(","))))
    if not truth:
        raise TagCalibrationError(f"the labels {path} name no photo")
    return truth


def embed_images(
    repository: Path, manifest: ModelManifest, folder: Path, settings: Settings
) -> tuple[list[str], Embeddings]:
    """The folder's readable photos (ids as the indexer gives them) through the image graph."""
    source = open_source(str(folder.resolve()), settings)
    catalog = read_catalog(source, settings.indexer.metadata_files)
    ids: list[str] = []
    pixels: list[AnyArray] = []
    for photo in catalog.photos.values():
        try:
            image = decode_image(source.read(photo.key), manifest.image.size)
        except (InvalidImage, OSError):
            continue
        ids.append(photo.photo_id)
        pixels.append(resize_and_crop(image, manifest.image))
    if not ids:
        raise TagCalibrationError(f"no readable photo in {folder}")
    graph = version_dir(repository, IMAGE_MODEL, manifest.version) / "model.onnx"
    sess, _ = session(graph)
    return ids, run_batches(sess, IMAGE_INPUT, np.stack(pixels))


def text_embedder(repository: Path, manifest: ModelManifest) -> Callable[[list[str]], Embeddings]:
    """Texts -> embeddings through the version's tokenizer and text graph, batched and padded
    as the Triton client pads them."""
    tokenizer = load_tokenizer(repository, manifest.version)
    graph = version_dir(repository, TEXT_MODEL, manifest.version) / "model.onnx"
    sess, _ = session(graph)

    def embed(texts: list[str]) -> Embeddings:
        ids = tokenizer.encode_batch(texts)
        rows = [
            run_batches(
                sess, TEXT_INPUT, pad_for(manifest.tokenizer, ids[i : i + MAX_BATCH_SIZE], 1)
            )
            for i in range(0, len(ids), MAX_BATCH_SIZE)
        ]
        return np.concatenate(rows).astype(np.float32)

    return embed


def truth_matrix(
    ids: list[str], truth: Mapping[str, frozenset[str]], names: tuple[str, ...]
) -> tuple[list[int], AnyArray]:
    """The rows of `ids` that have labels, and [rows, V] bool: which tags each should get."""
    column = {name: i for i, name in enumerate(names)}
    unknown = sorted({t for tags in truth.values() for t in tags} - set(column))
    if unknown:
        raise TagCalibrationError(
            f"{len(unknown)} labelled tags are not in the vocabulary: {', '.join(unknown[:10])}"
        )
    rows = [i for i, pid in enumerate(ids) if pid in truth]
    matrix = np.zeros((len(rows), len(names)), dtype=bool)
    for r, i in enumerate(rows):
        matrix[r, [column[t] for t in truth[ids[i]]]] = True
    return rows, matrix


def score(predicted: AnyArray, truth: AnyArray, rule: TagRule) -> Scored:
    """Micro-averaged precision, recall and F1 of `predicted` ([N, V] bool) against `truth`."""
    hits = int((predicted & truth).sum())
    made, wanted = int(predicted.sum()), int(truth.sum())
    precision = hits / made if made else 0.0
    recall = hits / wanted if wanted else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return Scored(rule, precision, recall, f1, made / len(truth))


def search_grid(
    cosines: AnyArray, excess: AnyArray, truth: AnyArray, max_tags: int = MAX_TAGS
) -> list[Scored]:
    """Every (threshold, margin) of the grid, best F1 first (ties: the higher precision).

    A photo's passing tags are those whose cosine reaches max(threshold, its mean + margin):
    a prefix of its tags by cosine, so each rule is a count per photo on the sorted rows.
    """
    order = np.argsort(-cosines, axis=1, kind="stable")
    ranked = np.take_along_axis(cosines, order, axis=1)
    hits = np.concatenate(
        [np.zeros((len(truth), 1)), np.cumsum(np.take_along_axis(truth, order, axis=1), axis=1)],
        axis=1,
    )
    means = (cosines - excess)[:, 0]
    wanted = int(truth.sum())
    thresholds = [NO_BOUND, *np.unique(np.round(np.quantile(cosines, QUANTILES), 4)).tolist()]
    margins = [NO_BOUND, *np.unique(np.round(np.quantile(excess, QUANTILES), 4)).tolist()]
    rows = np.arange(len(truth))
    found = []
    for threshold in thresholds:
        for margin in margins:
            cutoff = np.maximum(threshold, means + margin)
            # Tags at or above the cutoff; float32 scores against a float64 cutoff as the
            # rule compares them.
            passing = (ranked >= cutoff[:, None].astype(ranked.dtype)).sum(axis=1)
            counts = np.minimum(passing, max_tags)
            tp, made = float(hits[rows, counts].sum()), int(counts.sum())
            p = tp / made if made else 0.0
            r = tp / wanted if wanted else 0.0
            f1 = 2 * p * r / (p + r) if tp else 0.0
            found.append(Scored(TagRule(threshold, margin), p, r, f1, made / len(truth)))
    found.sort(key=lambda s: (-s.f1, -s.precision))
    return found


def chance(truth: AnyArray, tags_per_photo: float) -> dict[str, float]:
    """A random tagger's figures at `tags_per_photo` tags a photo."""
    base = float(truth.mean())
    recall = tags_per_photo / truth.shape[1]
    f1 = 2 * base * recall / (base + recall) if base + recall else 0.0
    return {"chance": base, "chance_recall": recall, "chance_f1": f1}


def evaluate(
    tags: list[list[str]], truth: list[frozenset[str]], names: tuple[str, ...]
) -> dict[str, float]:
    """Precision, recall, F1 and tags a photo of `tags` against `truth`, counting only the
    names in `names` (a kind of tag, or the whole vocabulary), and chance's figures."""
    column = {name: i for i, name in enumerate(names)}
    made = np.zeros((len(truth), len(names)), dtype=bool)
    wanted = np.zeros_like(made)
    for row, (given, true) in enumerate(zip(tags, truth, strict=True)):
        made[row, [column[t] for t in given if t in column]] = True
        wanted[row, [column[t] for t in true if t in column]] = True
    s = score(made, wanted, TagRule(0.0, 0.0))
    return {
        "precision": s.precision,
        "recall": s.recall,
        "f1": s.f1,
        "tags_per_photo": s.tags_per_photo,
        "truth_per_photo": float(wanted.sum(axis=1).mean()),
        **chance(wanted, s.tags_per_photo),
    }


def decide(figures: Mapping[str, float]) -> tuple[bool, str]:
    """Whether the rule's tags are worth storing, and the reason said either way."""
    p, f1, base = figures["precision"], figures["f1"], figures["chance"]
    said = (
        f"F1 {f1:.3f} vs chance {figures['chance_f1']:.3f}; precision {p:.3f} vs base rate "
        f"{base:.3f} ({p / base if base else 0.0:.1f}x)"
    )
    if figures["tags_per_photo"] == 0:
        return False, f"the best rule tags nothing: {said}"
    if p < MIN_LIFT * base:
        return False, f"tags no better than chance (under {MIN_LIFT:g}x the base rate): {said}"
    return True, said


def calibrate_tags(
    repository: Path,
    version: int,
    photos_dir: Path,
    labels: Path,
    vocabulary: Vocabulary,
    *,
    settings: Settings,
    max_tags: int = MAX_TAGS,
    now: datetime | None = None,
) -> TagReport:
    """Measure version N's tag rule on the labelled photos (nothing written)."""
    manifest = load_manifest(repository, version)
    truth = read_labels(labels)
    ids, vectors = embed_images(repository, manifest, photos_dir, settings)
    rows, wanted = truth_matrix(ids, truth, vocabulary.names)
    if len(rows) < MIN_PHOTOS:
        raise TagCalibrationError(
            f"{len(rows)} of the labelled photos are in {photos_dir}; at least {MIN_PHOTOS} "
            "are needed (labels name photos by the ids the indexer gives them)"
        )
    tag_vectors = embed_vocabulary(vocabulary, text_embedder(repository, manifest))
    photos = vectors[rows]
    cosines, excess = tag_scores(photos, tag_vectors)
    grid = search_grid(cosines, excess, wanted, max_tags)
    rule = grid[0].rule
    # The figures of the rule exactly as the indexer applies it.
    tags = auto_tags(photos, vocabulary.names, tag_vectors, rule, max_tags=max_tags)
    figures = {
        **evaluate(tags, [truth[ids[i]] for i in rows], vocabulary.names),
        "photos": float(len(rows)),
        "vocabulary_size": float(len(vocabulary)),
    }
    enabled, reason = decide(figures)
    calibration = TagCalibration(
        threshold=rule.threshold,
        margin=rule.margin,
        max_tags=max_tags,
        enabled=enabled,
        reason=reason,
        figures={k: round(v, 4) for k, v in figures.items()},
        vocabulary=f"{vocabulary.source or 'vocabulary'} ({len(vocabulary)} tags, digest "
        f"{vocabulary.digest}) on {len(rows)} photos of {photos_dir.name} labelled by "
        f"{labels.name}",
        vocabulary_digest=vocabulary.digest,
        calibrated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
    )
    return TagReport(calibration, grid[:5], len(rows))


def save_tags(repository: Path, version: int, tagging: TagCalibration) -> Path:
    """Write the tag rule into version N's manifest, keeping its search calibration (a version
    without one gets the defaults, which search exactly as no calibration does)."""
    manifest = load_manifest(repository, version)
    search = manifest.calibration or SearchCalibration()
    manifest.calibration = search.model_copy(update={"tagging": tagging})
    return write_manifest(repository, manifest)
