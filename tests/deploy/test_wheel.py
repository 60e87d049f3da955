"""The project's wheel, built as the app image builds it (`pip wheel . --no-deps` over the
folders its Dockerfile copies): it must carry the search page's files, or the installed app
refuses to start (its /static directory is missing) and the image serves no page."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.deployfiles import ROOT

DOCKERFILE = ROOT / "infra" / "docker" / "app.Dockerfile"
STATIC = ROOT / "query_api" / "static"


def _copied(dockerfile: Path) -> list[str]:
    """What the build stage copies from the checkout: `COPY SRC... DEST` lines without --from."""
    names: list[str] = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--") for w in words):
            names.extend(words[1:-1])
    return names


def test_the_wheel_carries_the_search_page(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    copied = _copied(DOCKERFILE)
    assert "query_api" in copied and "pyproject.toml" in copied
    for name in copied:
        if name.startswith("requirements/"):
            continue  # the runtime stage's lock, not the wheel's source
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path / "wheels"),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "wheels").glob("photosearch-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    page = sorted(f"query_api/static/{p.name}" for p in STATIC.iterdir() if p.is_file())
    assert "query_api/static/index.html" in page
    assert [name for name in page if name not in packed] == []
