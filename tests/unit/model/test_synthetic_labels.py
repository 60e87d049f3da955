"""The synthetic photos' tag truth: labels.tsv and vocabulary.txt from the content records."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from core.tagging.vocabulary import load_vocabulary
from model.cli import model_app
from model.synthetic import COLOURS, SHAPES, TEXTURES, generate
from model.synthetic_labels import (
    KINDS,
    LABELS_FILE,
    VOCABULARY_FILE,
    labels,
    vocabulary,
    write_labels,
)


def test_the_vocabulary_is_every_shape_colour_and_texture_once() -> None:
    assert vocabulary() == (*SHAPES, *COLOURS, *TEXTURES)
    assert len(set(vocabulary())) == len(vocabulary()) == 18
    assert set(KINDS) == {"shape", "colour", "texture"}


def test_a_photo_is_labelled_with_its_shape_colour_and_texture() -> None:
    photo = generate(1, seed=3)[0]
    c = photo.content
    assert labels(c) == (c.shape, c.colour, c.texture)


def test_the_files_read_back_as_the_truth_and_a_vocabulary(tmp_path: Path) -> None:
    photos = generate(30, seed=2)
    labels_file, vocabulary_file = write_labels(photos, tmp_path)
    rows = [line.split("\t") for line in labels_file.read_text().splitlines()]
    assert [r[0] for r in rows] == [p.id for p in photos]
    assert [tuple(r[1].split(",")) for r in rows] == [labels(p.content) for p in photos]
    assert load_vocabulary(vocabulary_file).names == vocabulary()
    # "plain" is a texture like the others: some photos of 30 show it.
    assert any(p.content.texture == "plain" for p in photos)


def test_the_synthetic_command_writes_them_beside_the_photos(tmp_path: Path) -> None:
    answer = CliRunner().invoke(model_app, ["synthetic", "--out", str(tmp_path), "--count", "5"])
    assert answer.exit_code == 0, answer.output
    lines = (tmp_path / LABELS_FILE).read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == sorted(
        p.name for p in (tmp_path / "photos").glob("*.png")
    )
    assert (tmp_path / VOCABULARY_FILE).is_file()
    assert "calibrate-tags" in answer.output
