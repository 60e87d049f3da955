"""calibrate-tags' parts on hand-made scores (the labels, the grid, chance and the decision),
and the command end to end on the session's tiny random-weight export."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from core.embedding.manifest import SearchCalibration, TagCalibration, load_manifest
from core.tagging.rule import TagRule, auto_tags
from photosearch.calibrate import save
from photosearch.calibrate_tags import (
    MIN_LIFT,
    TagCalibrationError,
    chance,
    decide,
    evaluate,
    read_labels,
    save_tags,
    search_grid,
    truth_matrix,
)
from photosearch.calibrate_tags_cli import calibrate_tags_command
from photosearch.cli import app


def test_labels_read_as_normalised_tag_sets(tmp_path: Path) -> None:
    path = tmp_path / "labels.tsv"
    path.write_text("# truth\na.png\tRed,circle\n\nb.png\t\nc.png\tstar, Dotted\n")
    assert read_labels(path) == {
        "a.png": frozenset({"red", "circle"}),
        "b.png": frozenset(),
        "c.png": frozenset({"star", "dotted"}),
    }


def test_a_malformed_or_empty_labels_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.tsv"
    path.write_text("a.png red\n")
    with pytest.raises(TagCalibrationError, match=r"labels.tsv:1: not photo_id<TAB>"):
        read_labels(path)
    path.write_text("# nothing\n")
    with pytest.raises(TagCalibrationError, match="name no photo"):
        read_labels(path)
    with pytest.raises(TagCalibrationError, match="cannot read"):
        read_labels(tmp_path / "absent.tsv")


def test_labels_outside_the_vocabulary_are_refused_by_name() -> None:
    truth = {"a": frozenset({"red", "zebra"})}
    with pytest.raises(TagCalibrationError, match="not in the vocabulary: zebra"):
        truth_matrix(["a"], truth, ("red", "blue"))
    rows, matrix = truth_matrix(["x", "a"], {"a": frozenset({"blue"})}, ("red", "blue"))
    assert rows == [1] and matrix.tolist() == [[False, True]]


def test_the_grid_finds_the_rule_that_separates_true_tags() -> None:
    # 40 photos, 6 tags, one true tag each: its cosine 0.5, the others' at most 0.3.
    rng = np.random.default_rng(1)
    truth = np.zeros((40, 6), dtype=bool)
    truth[np.arange(40), rng.integers(0, 6, size=40)] = True
    cosines = np.where(truth, 0.5, rng.uniform(0.0, 0.3, size=(40, 6))).astype(np.float32)
    excess = cosines - cosines.mean(axis=1, keepdims=True)
    grid = search_grid(cosines, excess, truth)
    best = grid[0]
    assert (best.precision, best.recall, best.f1) == (1.0, 1.0, 1.0)
    assert best.tags_per_photo == 1.0
    assert all(a.f1 >= b.f1 for a, b in itertools.pairwise(grid))
    # The grid's best rule tags as the indexer's rule does: with the tags as the axes, a
    # photo's vector is its row of cosines.
    names = tuple("abcdef")
    tags = auto_tags(cosines, names, np.eye(6, dtype=np.float32), best.rule)
    assert tags == [[names[int(np.flatnonzero(row)[0])]] for row in truth]


def test_the_grid_caps_tags_a_photo() -> None:
    truth = np.ones((30, 12), dtype=bool)
    cosines = np.tile(np.linspace(0.9, 0.1, 12, dtype=np.float32), (30, 1))
    excess = cosines - cosines.mean(axis=1, keepdims=True)
    best = search_grid(cosines, excess, truth, max_tags=4)[0]
    assert best.tags_per_photo == 4.0 and best.precision == 1.0
    assert best.recall == pytest.approx(4 / 12)


def test_chance_is_the_base_rate_at_the_same_tags_a_photo() -> None:
    truth = np.zeros((10, 20), dtype=bool)
    truth[:, :2] = True  # 2 true of 20: base rate 0.1
    c = chance(truth, tags_per_photo=4.0)
    assert c["chance"] == pytest.approx(0.1)
    assert c["chance_recall"] == pytest.approx(0.2)
    assert c["chance_f1"] == pytest.approx(2 * 0.1 * 0.2 / 0.3)


def test_tags_are_enabled_only_well_above_chance() -> None:
    figures = {"precision": 0.5, "f1": 0.5, "chance": 0.1, "chance_f1": 0.1, "tags_per_photo": 2}
    assert decide(figures)[0] is True
    just_under = figures | {"precision": MIN_LIFT * 0.1 - 0.001}
    enabled, reason = decide(just_under)
    assert enabled is False and reason.startswith("tags no better than chance")
    enabled, reason = decide(figures | {"tags_per_photo": 0})
    assert enabled is False and "tags nothing" in reason


@pytest.fixture
def own_repository(repository: Path, tmp_path: Path) -> Path:
    """A copy of the session's random-weight repository that this test may write to."""
    return Path(shutil.copytree(repository, tmp_path / "models"))


def tagging(version: int, repository: Path) -> TagCalibration | None:
    calibration = load_manifest(repository, version).calibration
    return None if calibration is None else calibration.tagging


def test_save_keeps_the_search_calibration_and_calibrate_keeps_the_tags(
    own_repository: Path,
) -> None:
    rule = TagCalibration(threshold=0.2, margin=0.05, enabled=True, vocabulary="v")
    save_tags(own_repository, 1, rule)
    assert load_manifest(own_repository, 1).calibration == SearchCalibration(tagging=rule)
    save(own_repository, 1, SearchCalibration(rrf_k=20))
    after = load_manifest(own_repository, 1).calibration
    assert after is not None and after.rrf_k == 20 and after.tagging == rule
    save_tags(own_repository, 1, rule.model_copy(update={"threshold": 0.3}))
    again = load_manifest(own_repository, 1).calibration
    assert again is not None and again.rrf_k == 20 and again.tagging is not None
    assert again.tagging.rule() == TagRule(0.3, 0.05)


def test_the_command_finds_random_weights_no_better_than_chance(
    own_repository: Path, tmp_path: Path
) -> None:
    from model.synthetic import generate, write_photos
    from model.synthetic_labels import write_labels

    photos = generate(60, seed=5)
    write_photos(photos, tmp_path / "photos")
    labels, vocabulary = write_labels(photos, tmp_path)
    args = [
        "model", "calibrate-tags", "--version", "1", "--photos", str(tmp_path / "photos"),
        "--labels", str(labels), "--vocabulary", str(vocabulary),
        "--repository", str(own_repository),
    ]  # fmt: skip
    dry = CliRunner().invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "tags DISABLED: tags no better than chance" in dry.output
    assert "dry run" in dry.output and tagging(1, own_repository) is None
    written = CliRunner().invoke(app, args)
    assert written.exit_code == 0, written.output
    stored = tagging(1, own_repository)
    assert stored is not None and stored.enabled is False
    assert stored.reason.startswith("tags no better than chance")
    assert stored.figures["photos"] == 60 and stored.figures["vocabulary_size"] == 18
    assert stored.figures["chance"] == pytest.approx(3 / 18, abs=1e-4)
    assert stored.figures["precision"] < MIN_LIFT * stored.figures["chance"]
    assert "stores no automatic tags" in written.output


def test_the_command_refuses_what_cannot_calibrate(own_repository: Path, tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    labels = tmp_path / "labels.tsv"
    labels.write_text("a.png\tred\n")
    base = ["model", "calibrate-tags", "--photos", str(tmp_path / "photos")]
    base += ["--labels", str(labels), "--repository", str(own_repository)]
    absent = CliRunner().invoke(app, [*base, "--version", "9"])
    assert absent.exit_code == 2 and "no manifest" in absent.output
    empty = CliRunner().invoke(app, [*base, "--version", "1"])
    assert empty.exit_code == 1 and "no readable photo" in empty.output
    assert tagging(1, own_repository) is None
    assert calibrate_tags_command.__doc__ is not None


def test_evaluation_counts_only_the_names_of_one_kind() -> None:
    tags = [["red", "circle", "striped"], ["blue"], []]
    truth = [frozenset({"red", "square"}), frozenset({"blue", "star"}), frozenset({"green"})]
    colours = evaluate(tags, truth, ("red", "blue", "green"))
    assert colours["precision"] == 1.0 and colours["recall"] == pytest.approx(2 / 3)
    assert colours["tags_per_photo"] == pytest.approx(2 / 3)
    assert colours["chance"] == pytest.approx(1 / 3)
    shapes = evaluate(tags, truth, ("circle", "square", "star"))
    assert shapes["precision"] == 0.0 and shapes["f1"] == 0.0
