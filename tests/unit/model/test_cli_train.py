"""`photosearch model synthetic` and `photosearch model train-tiny`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from model.cli import model_app
from model.cli_train import synthetic_command, train_tiny_command
from model.synthetic import MANIFEST, generate
from model.synthetic_judgements import QRELS_FILE
from model.train import CONFIG, RECIPE, checkpoint_paths


def test_the_commands_are_model_commands() -> None:
    names = {c.name: c.callback for c in model_app.registered_commands}
    assert names["synthetic"] is synthetic_command
    assert names["train-tiny"] is train_tiny_command


def test_the_command_writes_photos_a_folder_source_indexes(tmp_path: Path) -> None:
    answer = CliRunner().invoke(
        model_app, ["synthetic", "--out", str(tmp_path), "--count", "12", "--seed", "4"]
    )
    assert answer.exit_code == 0, answer.output
    files = sorted(p.name for p in (tmp_path / "photos").glob("*.png"))
    assert files == [p.id for p in generate(12, seed=4)]
    rows = [json.loads(line) for line in (tmp_path / "photos" / MANIFEST).read_text().splitlines()]
    assert [r["path"] for r in rows] == files
    assert "id" not in rows[0]  # the photo id is the file's key, with or without the manifest
    with Image.open(tmp_path / "photos" / files[0]) as picture:
        assert picture.size == (64, 64)
    assert (tmp_path / "judgements" / QRELS_FILE).is_file()


def test_train_tiny_prints_the_cached_checkpoint_and_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOTOSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    checkpoint, record = checkpoint_paths(CONFIG, RECIPE, tmp_path / "cache")
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    figures = {
        "precision_at_10": 0.2,
        "recall_at_10": 0.15,
        "precision_lift": 9.6,
        "recall_lift": 9.0,
        "chance_precision_at_10": 0.021,
        "chance_recall_at_10": 0.017,
    }
    twin = figures | {"precision_at_10": 0.02, "precision_lift": 1.0}
    record.write_text(json.dumps({"trained": figures, "untrained": twin, "seconds": 60.0}))
    copy = tmp_path / "out" / "tiny.pt"
    answer = CliRunner().invoke(model_app, ["train-tiny", "--out", str(copy)])
    assert answer.exit_code == 0, answer.output
    assert copy.read_bytes() == b"weights"
    assert f"checkpoint {copy} (from the cache)" in answer.output
    lines = answer.output.splitlines()
    assert any(line.split()[:3] == ["trained", "0.200", "(9.6x)"] for line in lines)
    assert any(line.split()[:4] == ["untrained", "twin", "0.020", "(1.0x)"] for line in lines)
    assert any(line.split()[:3] == ["chance", "0.021", "0.017"] for line in lines)
