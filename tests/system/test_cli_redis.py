"""The command line and a Redis that is not PhotoSearch's (the build machines run one on
6379): a command refuses it, exits non-zero, and leaves every key there as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.support.redisserver import RedisServer


@pytest.fixture
def foreign(tmp_path: Path) -> Iterator[Redis]:
    """Someone else's Redis, with keys of its own."""
    with RedisServer(tmp_path / "foreign") as server:
        client = Redis.from_url(server.url)
        client.set("session:42", "theirs")
        client.rpush("queue", "a", "b")
        client.hset("photosearch:settings", "x", "1")  # even a key under our prefix
        try:
            yield client
        finally:
            client.close()


def _contents(redis: Redis) -> tuple[int, dict[bytes, tuple[object, int]]]:
    return redis.dbsize(), {key: (redis.type(key), redis.ttl(key)) for key in redis.scan_iter()}


@pytest.mark.parametrize(
    "command",
    [["index", "status"], ["index", "sync", "--source", "PHOTOS"], ["index", "collections"]],
)
def test_a_command_refuses_a_redis_that_is_not_photosearchs_and_writes_nothing(
    foreign: Redis, tmp_path: Path, command: list[str]
) -> None:
    before = _contents(foreign)
    photos = tmp_path / "photos"
    photos.mkdir()
    port = foreign.connection_pool.connection_kwargs["port"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    env |= {
        "PHOTOSEARCH_REDIS__URL": f"redis://127.0.0.1:{port}/0",
        "PHOTOSEARCH_DATA_DIR": str(tmp_path / "data"),  # no `up` runs there
    }
    args = [str(photos) if arg == "PHOTOS" else arg for arg in command]
    result = subprocess.run(
        [sys.executable, "-m", "photosearch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"the Redis at 127.0.0.1:{port}/0 is not PhotoSearch's" in result.stderr
    assert "PHOTOSEARCH_REDIS__URL" in result.stderr
    assert _contents(foreign) == before
