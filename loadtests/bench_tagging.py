"""Benchmark automatic tags: the tiny model trained on synthetic photos against its untrained
twin and chance, per kind of tag (shape, colour, texture), on held-back photos.

    python -m loadtests.bench_tagging [--work DIR]

Each version's rule is calibrated (`photosearch model calibrate-tags`, photosearch/
calibrate_tags.py) on the default synthetic set (seed 0, 400 photos) with the synthetic
vocabulary (6 shapes, 8 colours, 4 textures: model/synthetic_labels.py), then applied to the
held-back set (seed 7, 600 photos; neither is a training photo). Chance is a tagger that gives
each photo as many tags of that kind at random: its precision is the kind's base rate (one true
tag of the kind's names). Prints Markdown; no thresholds.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.embedding.manifest import TagCalibration, load_manifest
from core.settings import Settings
from core.tagging.rule import auto_tags
from core.tagging.vocabulary import Vocabulary, embed_vocabulary, load_vocabulary
from loadtests.registry import Figure
from model.export import export_model
from model.heldback import HELD_BACK_COUNT, HELD_BACK_SEED
from model.synthetic import generate, write_photos
from model.synthetic_labels import KINDS, labels, write_labels
from model.train import CONFIG, trained_checkpoint
from photosearch.calibrate_tags import (
    calibrate_tags,
    embed_images,
    evaluate,
    read_labels,
    text_embedder,
)

TRAINED, UNTRAINED = 1, 2
CALIBRATION_COUNT, CALIBRATION_SEED = 400, 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, help="Keep the exports and photos here (default: temp).")
    return p


def write_set(folder: Path, count: int, seed: int) -> tuple[Path, Path, Path]:
    """The photos, labels.tsv and vocabulary.txt of one seeded synthetic set."""
    photos = generate(count, seed)
    if not (folder / "photos").is_dir():
        write_photos(photos, folder / "photos")
    return folder / "photos", *write_labels(photos, folder)


def held_back_rows(
    repo: Path,
    version: int,
    rule: TagCalibration,
    vocabulary: Vocabulary,
    photos: Path,
    truth: dict[str, frozenset[str]],
) -> list[tuple[str, dict[str, float]]]:
    """(kind, figures) of the rule's tags on the held-back photos: every kind, then all."""
    manifest = load_manifest(repo, version)
    ids, vectors = embed_images(repo, manifest, photos, Settings())
    tag_vectors = embed_vocabulary(vocabulary, text_embedder(repo, manifest))
    tags = auto_tags(vectors, vocabulary.names, tag_vectors, rule.rule(), max_tags=rule.max_tags)
    wanted = [truth[pid] for pid in ids]
    rows = [(kind, evaluate(tags, wanted, names)) for kind, names in KINDS.items()]
    return [*rows, ("all", evaluate(tags, wanted, vocabulary.names))]


# By model: its calibrated rule, and its figures by kind of tag.
Results = dict[str, tuple[TagCalibration, list[tuple[str, dict[str, float]]]]]


def table(results: Results) -> str:
    lines = [
        "| model | kind | precision | recall | F1 | tags a photo | chance precision "
        "| chance recall | chance F1 | F1 / chance |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, (_, rows) in results.items():
        for kind, f in rows:
            lift = f["f1"] / f["chance_f1"] if f["chance_f1"] else 0.0
            lines.append(
                f"| {model} | {kind} | {f['precision']:.3f} | {f['recall']:.3f} | {f['f1']:.3f} "
                f"| {f['tags_per_photo']:.2f} | {f['chance']:.3f} | {f['chance_recall']:.3f} "
                f"| {f['chance_f1']:.3f} | {lift:.1f}x |"
            )
    return "\n".join(lines)


def rules(results: Results) -> str:
    lines = [
        "| model | threshold | margin | enabled | calibration F1 | calibration precision "
        "| base rate | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, (c, _) in results.items():
        f = c.figures
        lines.append(
            f"| {model} | {c.threshold:.4f} | {c.margin:.4f} | {c.enabled} | {f['f1']:.3f} "
            f"| {f['precision']:.3f} | {f['chance']:.3f} | {c.reason} |"
        )
    return "\n".join(lines)


@dataclass
class TaggingFigures:
    vocabulary: int  # tags in the synthetic vocabulary
    held_back: int  # photos the rules were applied to
    results: Results

    def all_kinds(self, model: str = "trained") -> dict[str, float]:
        return dict(self.results[model][1])["all"]


def run(work: Path) -> TaggingFigures:
    repo = work / "models"
    checkpoint = trained_checkpoint().checkpoint
    for version, weights in ((TRAINED, str(checkpoint)), (UNTRAINED, "none")):
        if not (repo / f"manifest-{version}.json").is_file():
            export_model(str(CONFIG), weights, repo, version=version)
    photos, labels_file, vocabulary_file = write_set(
        work / "calibration", CALIBRATION_COUNT, CALIBRATION_SEED
    )
    held_back, held_labels, _ = write_set(work / "held-back", HELD_BACK_COUNT, HELD_BACK_SEED)
    vocabulary = load_vocabulary(vocabulary_file)
    truth = read_labels(held_labels)
    assert all(len(t) == len(labels(generate(1)[0].content)) for t in truth.values())
    results = {}
    for model, version in (("trained", TRAINED), ("untrained twin", UNTRAINED)):
        report = calibrate_tags(repo, version, photos, labels_file, vocabulary, settings=Settings())
        c = report.calibration
        results[model] = (c, held_back_rows(repo, version, c, vocabulary, held_back, truth))
    return TaggingFigures(len(vocabulary), len(truth), results)


def measure(args: argparse.Namespace) -> TaggingFigures:
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        return run(args.work)
    with tempfile.TemporaryDirectory(prefix="bench-tagging-") as work:
        return run(Path(work))


def report(f: TaggingFigures) -> str:
    return (
        f"Rules calibrated on {CALIBRATION_COUNT} synthetic photos (seed {CALIBRATION_SEED}), "
        f"vocabulary of {f.vocabulary} tags:\n\n{rules(f.results)}\n\n"
        f"Their tags on {f.held_back} held-back photos (seed {HELD_BACK_SEED}):\n\n"
        f"{table(f.results)}"
    )


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def held_back(f: TaggingFigures) -> str:
    chance = f.all_kinds()
    return (
        f"the trained model's rule on {f.held_back} held-back synthetic photos, all kinds; "
        f"chance: precision {100 * chance['chance']:.1f}%, F1 {100 * chance['chance_f1']:.1f}%"
    )


FIGURES: list[Figure[TaggingFigures]] = [
    Figure(
        "precision of the trained model's tags",
        "%",
        lambda f: 100 * f.all_kinds()["precision"],
        held_back,
    ),
    Figure(
        "recall of the trained model's tags",
        "%",
        lambda f: 100 * f.all_kinds()["recall"],
        held_back,
    ),
    Figure("F1 of the trained model's tags", "%", lambda f: 100 * f.all_kinds()["f1"], held_back),
    Figure(
        "F1 of the untrained twin's tags",
        "%",
        lambda f: 100 * f.all_kinds("untrained twin")["f1"],
        lambda f: (
            f"the same photos; its rule enabled: {f.results['untrained twin'][0].enabled} "
            f"({f.results['untrained twin'][0].reason})"
        ),
    ),
]


def main(argv: list[str] | None = None) -> None:
    print(report(measure(parser().parse_args(argv))))


if __name__ == "__main__":
    main()
