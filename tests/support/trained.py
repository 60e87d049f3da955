"""Session fixtures of the tiny model trained on synthetic photos (model/train.py): its cached
checkpoint, a repository of it beside its untrained twin, and the default synthetic set.

The checkpoint is trained once per machine and cache (PHOTOSEARCH_CACHE_DIR, else
~/.cache/photosearch), not once per session: a session finds it there. A reindex takes any
exported version number (nothing refuses a lower one), but the repository goes trained ->
untrained -> trained again so that a test can switch both ways with versions that only grow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from model.export import export_model
from model.synthetic_judgements import SyntheticSet, write_set
from model.synthetic_labels import VOCABULARY_FILE
from model.train import CONFIG
from photosearch.cli import app

# The versions of trained_repository.
TRAINED = 1
UNTRAINED = 2
TRAINED_AGAIN = 3


@pytest.fixture(scope="session")
def trained_checkpoint() -> Path:
    """The trained tiny model's checkpoint, from the cache (trained into it the first time)."""
    from model.train import trained_checkpoint as cached

    return cached().checkpoint


@pytest.fixture(scope="session")
def trained_repository(tmp_path_factory: pytest.TempPathFactory, trained_checkpoint: Path) -> Path:
    """A model repository (CPU target): version 1 trained, 2 its untrained twin (the same
    architecture, the export's seeded random weights), 3 trained again."""
    repo = tmp_path_factory.mktemp("trained") / "models"
    for version, weights in (
        (TRAINED, str(trained_checkpoint)),
        (UNTRAINED, "none"),
        (TRAINED_AGAIN, str(trained_checkpoint)),
    ):
        export_model(str(CONFIG), weights, repo, version=version)
    return repo


@pytest.fixture(scope="session")
def synthetic_photos(tmp_path_factory: pytest.TempPathFactory) -> SyntheticSet:
    """The default synthetic set: `.photos` (PNG files and photos.jsonl) to index as a folder
    source, `.judgements` (queries.tsv, qrels.txt, equal to model/judgements/synthetic)."""
    return write_set(tmp_path_factory.mktemp("synthetic"))


def calibrate_tags(repo: Path, version: int, photos: Path, labelled: Path) -> str:
    """`photosearch model calibrate-tags` of a version on the photos, with the labels and the
    vocabulary `labelled` holds (model/synthetic_labels.py): its output, the figures."""
    answer = CliRunner().invoke(
        app,
        [
            "model", "calibrate-tags", "--version", str(version), "--photos", str(photos),
            "--labels", str(labelled / "labels.tsv"),
            "--vocabulary", str(labelled / VOCABULARY_FILE), "--repository", str(repo),
        ],
    )  # fmt: skip
    assert answer.exit_code == 0, answer.output
    return answer.output
