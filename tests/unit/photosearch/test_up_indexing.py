"""What `photosearch up` indexes: --photos first, else the source a sync remembered in Redis,
else the configured one."""

from __future__ import annotations

import uuid
from pathlib import Path

from core.jobs import Jobs
from core.settings import IndexerSettings, RedisSettings, Settings
from photosearch.up.indexing import source_to_index


def settings_in(folder: Path, configured: str | None = None) -> Settings:
    return Settings(
        data_dir=folder,
        redis=RedisSettings(prefix=f"unit-{uuid.uuid4().hex}"),
        indexer=IndexerSettings(source=configured),
    )


def test_photos_given_win_over_the_remembered_source(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    settings = settings_in(tmp_path)
    jobs = Jobs.from_settings(settings)
    jobs.remember("source", "file:///srv/catalogue")
    jobs.redis.close()
    said: list[str] = []
    assert source_to_index(settings, photos, said.append) == str(photos.resolve())
    assert source_to_index(settings, None, said.append) == "file:///srv/catalogue"
    assert said == []


def test_without_a_remembered_source_the_configured_one_is_indexed(tmp_path: Path) -> None:
    settings = settings_in(tmp_path, configured="s3://bucket/photos")
    assert source_to_index(settings, None, print) == "s3://bucket/photos"
