"""The demo photos: copied from the installed wheels, with a manifest, rewriting nothing equal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from core.demo import (
    DEMO_PHOTOS,
    MANIFEST,
    DemoPhotosUnavailable,
    package_dir,
    write_demo_photos,
)
from core.sources import LocalSource
from indexer.plan.catalog import read_catalog
from indexer.plan.metadata import parse_manifest


def shipped(package: str, source: str) -> Path:
    root = package_dir(package)
    assert root is not None, f"{package} is not installed: the demo extra belongs to the tests"
    return root / source


def mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_catalogue_ids_and_file_names_are_unique_and_tags_are_lowercase_words() -> None:
    assert len({p.id for p in DEMO_PHOTOS}) == len(DEMO_PHOTOS)
    assert len({p.filename for p in DEMO_PHOTOS}) == len(DEMO_PHOTOS)
    for photo in DEMO_PHOTOS:
        assert photo.id.startswith(f"{photo.package}-")
        assert photo.tags and all(t.isalpha() and t == t.lower() for t in photo.tags), photo.id
        assert photo.title and photo.photographer and photo.license


def test_every_catalogue_photo_is_shipped_by_an_installed_package(tmp_path: Path) -> None:
    result = write_demo_photos(tmp_path)

    assert result.unavailable == {}
    assert result.written == tuple(p.id for p in DEMO_PHOTOS)
    assert result.kept == ()
    assert result.manifest_written


def test_written_photos_decode_and_are_the_package_files_byte_for_byte(tmp_path: Path) -> None:
    write_demo_photos(tmp_path)

    for photo in DEMO_PHOTOS:
        copy = tmp_path / photo.filename
        assert copy.read_bytes() == shipped(photo.package, photo.source).read_bytes()
        with Image.open(copy) as image:
            image.load()
            assert min(image.size) >= 150, photo.id


def test_manifest_parses_into_one_row_per_photo_with_its_id_and_tags(tmp_path: Path) -> None:
    write_demo_photos(tmp_path)

    rows, warnings = parse_manifest(MANIFEST, (tmp_path / MANIFEST).read_text())

    assert warnings == []
    assert set(rows) == {p.filename for p in DEMO_PHOTOS}
    for photo in DEMO_PHOTOS:
        row = rows[photo.filename]
        assert row.id == photo.id
        assert row.title == photo.title
        assert row.tags == sorted(photo.tags)
        assert row.photographer == photo.photographer
        assert row.license == photo.license


def test_indexer_catalog_sees_every_demo_photo_under_its_id(tmp_path: Path) -> None:
    write_demo_photos(tmp_path)

    catalog = read_catalog(LocalSource(tmp_path), (MANIFEST,))

    assert catalog.warnings == []
    assert catalog.rejected == {}
    assert sorted(catalog.photos) == sorted(p.id for p in DEMO_PHOTOS)
    chelsea = catalog.photos["skimage-chelsea"]
    assert chelsea.metadata is not None
    assert "cat" in chelsea.metadata["tags"]


def test_second_call_rewrites_nothing_so_no_version_changes(tmp_path: Path) -> None:
    write_demo_photos(tmp_path)
    before = mtimes(tmp_path)
    versions = {o.key: o.version for o in LocalSource(tmp_path).list_range()}

    again = write_demo_photos(tmp_path)

    assert again.written == ()
    assert again.kept == tuple(p.id for p in DEMO_PHOTOS)
    assert not again.manifest_written
    assert mtimes(tmp_path) == before
    assert {o.key: o.version for o in LocalSource(tmp_path).list_range()} == versions


def test_changed_photo_and_manifest_are_restored_and_nothing_else_rewritten(
    tmp_path: Path,
) -> None:
    write_demo_photos(tmp_path)
    chelsea = tmp_path / "chelsea.png"
    chelsea.write_bytes(b"not the cat")
    (tmp_path / MANIFEST).write_text("{}\n")
    before = mtimes(tmp_path)

    result = write_demo_photos(tmp_path)

    assert result.written == ("skimage-chelsea",)
    assert result.manifest_written
    assert chelsea.read_bytes() == shipped("skimage", "data/chelsea.png").read_bytes()
    after = mtimes(tmp_path)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"chelsea.png", MANIFEST}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_missing_package_and_missing_file_are_reported_with_a_reason(tmp_path: Path) -> None:
    # A scikit-image that ships chelsea.png alone, and no scikit-learn at all.
    fake = tmp_path / "fake-skimage"
    (fake / "data").mkdir(parents=True)
    (fake / "data" / "chelsea.png").write_bytes(shipped("skimage", "data/chelsea.png").read_bytes())
    locations = {"skimage": fake, "sklearn": None, "matplotlib": package_dir("matplotlib")}
    target = tmp_path / "photos"

    result = write_demo_photos(target, locate=locations.__getitem__)

    assert result.written == ("skimage-chelsea", "matplotlib-grace-hopper")
    assert result.unavailable["sklearn-china"] == "scikit-learn is not installed"
    assert (
        result.unavailable["skimage-astronaut"] == "scikit-image does not ship data/astronaut.png"
    )
    assert len(result.unavailable) == len(DEMO_PHOTOS) - 2
    rows = [json.loads(line) for line in (target / MANIFEST).read_text().splitlines()]
    assert [r["id"] for r in rows] == ["skimage-chelsea", "matplotlib-grace-hopper"]


def test_no_package_at_all_is_an_error_naming_the_demo_extra(tmp_path: Path) -> None:
    target = tmp_path / "photos"

    with pytest.raises(DemoPhotosUnavailable, match=r"photosearch\[demo\].*--photos DIR"):
        write_demo_photos(target, locate=lambda package: None)

    assert not target.exists()


def test_packages_are_located_without_being_imported(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from core.demo import write_demo_photos\n"
        f"write_demo_photos(Path({str(tmp_path)!r}))\n"
        "print(sorted({'skimage', 'sklearn', 'matplotlib'} & set(sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert run.stdout.strip() == "[]"
    assert len(list(tmp_path.iterdir())) == len(DEMO_PHOTOS) + 1
