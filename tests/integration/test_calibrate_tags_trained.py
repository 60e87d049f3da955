"""calibrate-tags on the tiny model trained on synthetic photos: the rule it calibrates on one
synthetic set tags held-back photos with their shape, colour and texture far above chance; the
untrained twin's rule is disabled as no better than chance, and its tags are chance's. Figures
against chance, never timings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.embedding.manifest import TagCalibration, load_manifest
from core.settings import Settings
from core.tagging.rule import auto_tags
from core.tagging.vocabulary import embed_vocabulary, load_vocabulary
from model.heldback import held_back_photos
from model.synthetic import COLOURS as PALETTE
from model.synthetic import write_photos
from model.synthetic_judgements import SyntheticSet
from model.synthetic_labels import VOCABULARY_FILE, labels, write_labels
from photosearch.calibrate_tags import MIN_LIFT, embed_images, evaluate, text_embedder
from tests.support.trained import TRAINED, UNTRAINED, calibrate_tags

# Measured (python -m loadtests.bench_tagging): the trained rule's tags on the held-back photos
# have precision 0.454 and recall 0.667 against chance's 0.167 and 0.245 at as many tags a
# photo (2.7x); colours 0.995 and 0.930 against 0.125 and 0.117. The tiny model knows colour
# well, texture a little, shape barely (its top shape is right for 25% of photos, chance 17%).
# The floors leave room for another machine's float noise and still demand 2x chance overall
# and 6x on colours.
PRECISION_FLOOR, RECALL_FLOOR = 0.35, 0.5
COLOUR_PRECISION_FLOOR, COLOUR_RECALL_FLOOR = 0.85, 0.75
LIFT_FLOOR, COLOUR_LIFT_FLOOR = 2.0, 6.0
# Random weights: at most this multiple of chance, give or take what one draw favours.
NEAR_CHANCE = 2.0
COLOURS = tuple(PALETTE)


@pytest.fixture(scope="module")
def own_repository(trained_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's trained repository this module writes calibrations into."""
    return Path(shutil.copytree(trained_repository, tmp_path_factory.mktemp("tags") / "models"))


@pytest.fixture(scope="module")
def labelled(synthetic_photos: SyntheticSet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """labels.tsv and vocabulary.txt of the session's synthetic set (seed 0)."""
    from model.synthetic import DEFAULT_SEED, generate

    out = tmp_path_factory.mktemp("labels")
    write_labels(generate(synthetic_photos.count, DEFAULT_SEED), out)
    return out


@pytest.fixture(scope="module")
def held_back(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, frozenset[str]]]:
    """The held-back photos (model/heldback.py: never in training, nor in the calibration set)
    and their truth."""
    photos = held_back_photos()
    folder = tmp_path_factory.mktemp("held-back")
    write_photos(photos, folder)
    return folder, {p.id: frozenset(labels(p.content)) for p in photos}


def calibrate(version: int, repo: Path, photos: Path, labelled: Path) -> tuple[str, TagCalibration]:
    output = calibrate_tags(repo, version, photos, labelled)
    calibration = load_manifest(repo, version).calibration
    assert calibration is not None and calibration.tagging is not None
    return output, calibration.tagging


def held_back_figures(
    version: int,
    repo: Path,
    rule: TagCalibration,
    labelled: Path,
    held_back: tuple[Path, dict[str, frozenset[str]]],
    kind: tuple[str, ...] | None = None,
) -> dict[str, float]:
    """The rule's tags on the held-back photos against their truth, as the indexer tags,
    counting the names of `kind` only (None: every name)."""
    folder, truth = held_back
    manifest = load_manifest(repo, version)
    vocabulary = load_vocabulary(labelled / VOCABULARY_FILE)
    ids, vectors = embed_images(repo, manifest, folder, Settings())
    tag_vectors = embed_vocabulary(vocabulary, text_embedder(repo, manifest))
    tags = auto_tags(vectors, vocabulary.names, tag_vectors, rule.rule(), max_tags=rule.max_tags)
    return evaluate(tags, [truth[pid] for pid in ids], kind or vocabulary.names)


def test_the_trained_models_tags_find_what_held_back_photos_show(
    own_repository: Path,
    synthetic_photos: SyntheticSet,
    labelled: Path,
    held_back: tuple[Path, dict[str, frozenset[str]]],
) -> None:
    output, rule = calibrate(TRAINED, own_repository, synthetic_photos.photos, labelled)
    assert rule.enabled, rule.reason
    assert "tags enabled" in output
    assert rule.figures["precision"] >= MIN_LIFT * rule.figures["chance"]
    f = held_back_figures(TRAINED, own_repository, rule, labelled, held_back)
    assert f["chance"] == pytest.approx(3 / 18)
    assert f["precision"] >= PRECISION_FLOOR, f
    assert f["recall"] >= RECALL_FLOOR, f
    assert f["precision"] >= LIFT_FLOOR * f["chance"], f
    assert f["recall"] >= LIFT_FLOOR * f["chance_recall"], f
    colours = held_back_figures(TRAINED, own_repository, rule, labelled, held_back, COLOURS)
    assert colours["precision"] >= COLOUR_PRECISION_FLOOR, colours
    assert colours["recall"] >= COLOUR_RECALL_FLOOR, colours
    assert colours["f1"] >= COLOUR_LIFT_FLOOR * colours["chance_f1"], colours


def test_the_untrained_twins_tags_are_chance_and_disabled(
    own_repository: Path,
    synthetic_photos: SyntheticSet,
    labelled: Path,
    held_back: tuple[Path, dict[str, frozenset[str]]],
) -> None:
    output, rule = calibrate(UNTRAINED, own_repository, synthetic_photos.photos, labelled)
    assert not rule.enabled
    assert rule.reason.startswith("tags no better than chance"), rule.reason
    assert "tags DISABLED" in output and "stores no automatic tags" in output
    f = held_back_figures(UNTRAINED, own_repository, rule, labelled, held_back)
    assert f["precision"] < NEAR_CHANCE * f["chance"], f
    assert f["f1"] < NEAR_CHANCE * f["chance_f1"], f
