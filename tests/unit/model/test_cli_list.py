"""`photosearch model list`: a repository that is not there, or holds no version, is an error
that says so (it printed nothing and exited 0); a repository's versions are listed."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from core.embedding.manifest import write_manifest
from model.cli import model_app
from tests.support.models import stand_in_manifest


def test_a_repository_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    for options in ([], ["--json"]):
        command = ["list", "--repository", str(tmp_path / "nope"), *options]
        answer = CliRunner().invoke(model_app, command)
        assert answer.exit_code == 2, options
        assert f"no model repository at {tmp_path / 'nope'}: no such folder" in answer.output


def test_a_repository_without_a_version_says_so(tmp_path: Path) -> None:
    answer = CliRunner().invoke(model_app, ["list", "--repository", str(tmp_path)])
    assert answer.exit_code == 1
    assert f"no model version in {tmp_path}: export one" in answer.output
    listed = CliRunner().invoke(model_app, ["list", "--repository", str(tmp_path), "--json"])
    assert (listed.exit_code, json.loads(listed.output)) == (0, [])


def test_each_version_is_a_line(tmp_path: Path) -> None:
    write_manifest(tmp_path, stand_in_manifest(1, 8))
    write_manifest(tmp_path, stand_in_manifest(2, 8, weights="laion2b_s34b_b79k"))
    answer = CliRunner().invoke(model_app, ["list", "--repository", str(tmp_path)])
    assert answer.exit_code == 0, answer.output
    rows = [line.split("\t")[:3] for line in answer.output.splitlines()]
    assert rows == [["1", "stand-in", "random"], ["2", "stand-in", "laion2b_s34b_b79k"]]
