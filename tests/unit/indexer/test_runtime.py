"""The worker's runtime (indexer/runtime.py): which near-duplicate threshold a job's model
version groups by. No Triton is reached: the manifests are read from the repository."""

from __future__ import annotations

from pathlib import Path

from core.embedding.manifest import SearchCalibration, TagCalibration, write_manifest
from core.settings import ModelSettings, Settings
from core.settings_indexer import IndexerSettings
from indexer.runtime import Runtime
from tests.support.models import stand_in_manifest


def test_a_versions_calibrated_threshold_wins_over_the_setting(
    tmp_path: Path, redis_url: str
) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    write_manifest(repo, stand_in_manifest(1, 4))
    calibrated = stand_in_manifest(2, 4)
    calibrated.calibration = SearchCalibration(duplicate_threshold=0.95)
    write_manifest(repo, calibrated)
    settings = Settings(
        data_dir=tmp_path,
        model=ModelSettings(repository=repo),
        indexer=IndexerSettings(duplicate_threshold=0.98),
    )
    runtime = Runtime(settings)
    try:
        assert runtime.duplicate_threshold(2) == 0.95
        assert runtime.duplicate_threshold(1) == 0.98  # never calibrated
        # A grouping pass over a version whose export is not here groups by the setting.
        assert runtime.duplicate_threshold(7) == 0.98
    finally:
        runtime.close()


def test_a_tag_rule_calibrated_while_the_worker_runs_counts_at_once(
    tmp_path: Path, redis_url: str
) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    manifest = stand_in_manifest(1, 4)
    write_manifest(repo, manifest)
    settings = Settings(data_dir=tmp_path, model=ModelSettings(repository=repo))
    runtime = Runtime(settings)
    try:
        assert runtime.taggers.describe(1).key == ""  # not calibrated yet
        assert runtime.images.manifest(1).calibration is None  # the client has read it
        rule = TagCalibration(threshold=0.2, margin=0.05, enabled=True)
        manifest.calibration = SearchCalibration(tagging=rule)
        write_manifest(repo, manifest)
        assert runtime.taggers.describe(1).on
        assert runtime.taggers.describe(7).key is None  # no such export: cannot tell
    finally:
        runtime.close()
