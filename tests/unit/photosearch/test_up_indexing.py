"""What `photosearch up` indexes: --photos first, else the source a sync remembered in Redis,
else the configured one; and how it waits for the API before saying where the page is, by the
test's clock."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from core.jobs import Jobs
from core.settings import RedisSettings, Settings
from core.settings_indexer import IndexerSettings
from photosearch.up.indexing import source_to_index, wait_ready
from tests.support.redisserver import session_url


def settings_in(folder: Path, configured: str | None = None) -> Settings:
    return Settings(
        data_dir=folder,
        # The session's Redis, not the default URL's (a Redis on this machine).
        redis=RedisSettings(url=session_url(), prefix=f"unit-{uuid.uuid4().hex}"),
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


class Clock:
    """The test's clock, which only the test's waits move."""

    def __init__(self) -> None:
        self.at = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.at

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.at += seconds
        return False


def test_the_api_is_probed_until_ready_between_waits_of_the_poll() -> None:
    answers = iter([None, {"status": "not ready"}, {"status": "ok"}])
    clock = Clock()
    ready, body = wait_ready(
        lambda: next(answers), ceiling_s=120, poll_s=0.5, now=clock, wait=clock.wait
    )
    assert (ready, body) == (True, {"status": "ok"})
    assert clock.waits == [0.5, 0.5]


def test_an_api_never_ready_is_given_up_at_the_ceiling_with_its_last_answer() -> None:
    clock = Clock()
    ready, body = wait_ready(
        lambda: {"status": "not ready", "at": clock.at},
        ceiling_s=10,
        poll_s=2,
        now=clock,
        wait=clock.wait,
    )
    assert not ready
    assert body == {"status": "not ready", "at": 12.0}  # the first probe past the ceiling
    assert clock.waits == [2] * 6


def test_a_set_event_ends_the_wait_for_the_api() -> None:
    stop = threading.Event()
    stop.set()  # `up` stopping
    probes: list[None] = []

    def probe() -> None:
        probes.append(None)

    assert wait_ready(probe, ceiling_s=120, wait=stop.wait) == (False, None)
    assert len(probes) == 1
