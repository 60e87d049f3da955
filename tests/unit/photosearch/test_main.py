"""`python -m photosearch` is the command line: its help lists every part of the system, and
`up` refuses a --photos folder that does not exist before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from photosearch.up.cli import up_command


def test_python_dash_m_photosearch_runs_the_command_line() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "photosearch", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for command in ("up", "index", "api", "model", "triton", "worker", "beat", "settings"):
        assert f" {command} " in shown, command


def test_up_refuses_photos_that_are_not_there_before_starting_anything(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(up_command)
    answer = CliRunner().invoke(app, ["--photos", str(tmp_path / "missing")])
    assert answer.exit_code == 2
    assert "does not exist" in answer.output
