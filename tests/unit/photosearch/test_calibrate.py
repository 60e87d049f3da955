"""`photosearch model calibrate` on the tiny test model (random weights, exported once a
session): photos whose titles alone say what they show, so the keyword ranking is right and
the vector ranking is noise; the fusion must learn to trust the words."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from core.embedding.manifest import load_manifest
from core.quality.judgements import JudgementSet, Query
from core.settings import Settings
from photosearch.calibrate import POOL, RRF_KS, CalibrationError, calibrate
from photosearch.calibrate_cli import calibrate_command
from photosearch.cli import app

SUBJECTS = ["harbour", "tulips", "lighthouse", "market", "glacier", "orchard"]


def judged_photos(folder: Path) -> JudgementSet:
    """Four photos of each subject, of random pixels, titled by their subject, among more
    photos than a ranking's pool (so the vector ranking's noise outranks some of them in the
    default fusion); a query per subject, relevant: that subject's photos."""
    folder.mkdir()
    rng = np.random.default_rng(3)
    rows = []

    def photo(name: str, photo_id: str, title: str) -> None:
        pixels = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name)
        rows.append({"path": name, "id": photo_id, "title": title})

    for s, subject in enumerate(SUBJECTS):
        for i in range(4):
            photo(f"{subject}-{i}.png", f"p{s}{i}", f"{subject} photo {i}")
    for i in range(POOL + 20):
        photo(f"other-{i}.png", f"o{i}", f"untitled {i}")
    (folder / "photos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queries = tuple(Query(f"q{s}", subject, ("subject",)) for s, subject in enumerate(SUBJECTS))
    qrels = {f"q{s}": {f"p{s}{i}": 1 for i in range(4)} for s in range(len(SUBJECTS))}
    return JudgementSet("titled", queries, qrels)


def write_set(folder: Path, judgements: JudgementSet) -> None:
    folder.mkdir()
    (folder / "queries.tsv").write_text(
        "".join(f"{q.id}\t{q.text}\t{','.join(q.tags)}\n" for q in judgements.queries)
    )
    (folder / "qrels.txt").write_text(
        "".join(
            f"{qid} 0 {pid} {grade}\n"
            for qid, grades in judgements.qrels.items()
            for pid, grade in grades.items()
        )
    )


def test_calibration_trusts_the_ranking_that_finds_the_judged_photos(
    repository: Path, tmp_path: Path
) -> None:
    judgements = judged_photos(tmp_path / "photos")
    report = calibrate(repository, 1, tmp_path / "photos", judgements, settings=Settings())
    c = report.calibration
    assert report.keyword_ndcg == pytest.approx(1.0)  # each title names its subject
    assert report.vector_ndcg < 0.9  # random weights
    assert c.keyword_weight > 1.0 and c.rrf_k in RRF_KS
    best = report.fusions[0]
    assert (best.rrf_k, best.keyword_weight) == (c.rrf_k, c.keyword_weight)
    assert all(best.ndcg >= f.ndcg for f in report.fusions)
    assert c.figures["ndcg_hybrid_calibrated"] > c.figures["ndcg_hybrid_default"]
    # The threshold sits above every pair of different photos, copies included.
    assert c.duplicate_threshold is not None
    assert report.nearest_distinct < c.duplicate_threshold <= 0.999
    assert set(report.copies_grouped) == {"crop", "jpeg40", "flip"}


def test_judgements_that_name_none_of_the_photos_are_refused(
    repository: Path, tmp_path: Path
) -> None:
    judgements = judged_photos(tmp_path / "photos")
    elsewhere = JudgementSet("elsewhere", judgements.queries, {"q0": {"nowhere": 1}})
    with pytest.raises(CalibrationError, match="none of the judged photos"):
        calibrate(repository, 1, tmp_path / "photos", elsewhere, settings=Settings())


def test_the_command_writes_the_calibration_into_the_versions_manifest(
    repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(repository, repo)  # the session's repository stays as exported
    judgements = judged_photos(tmp_path / "photos")
    write_set(tmp_path / "judged", judgements)
    args = ["model", "calibrate", "--version", "1", "--repository", str(repo)]
    args += ["--photos", str(tmp_path / "photos"), "--judgements", str(tmp_path / "judged")]
    dry = CliRunner().invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and load_manifest(repo, 1).calibration is None
    answer = CliRunner().invoke(app, args)
    assert answer.exit_code == 0, answer.output

    calibration = load_manifest(repo, 1).calibration
    assert calibration is not None and calibration.keyword_weight > 1.0
    assert f"keyword weight {calibration.keyword_weight}" in answer.output


def test_a_missing_version_or_photo_folder_is_one_clear_line(
    repository: Path, tmp_path: Path
) -> None:
    solo = typer.Typer()
    solo.command()(calibrate_command)
    write_set(tmp_path / "judged", judged_photos(tmp_path / "photos"))
    base = ["--repository", str(repository), "--judgements", str(tmp_path / "judged")]
    missing = CliRunner().invoke(solo, [*base, "--version", "9", "--photos", str(tmp_path)])
    assert missing.exit_code == 2 and "model version 9 has no manifest" in missing.output
    nowhere = tmp_path / "nowhere"
    absent = CliRunner().invoke(solo, [*base, "--version", "1", "--photos", str(nowhere)])
    assert absent.exit_code == 2 and f"no photo folder at {nowhere}" in absent.output
