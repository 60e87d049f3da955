"""The command line and a Redis that is not PhotoSearch's (the build machines run one on
6379): a command refuses it, exits non-zero, and leaves every key there as it was; with no
Redis named, it finds the `up` running on its data directory by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from core.deployment import mark
from photosearch.up.supervisor import STATE_FILE
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


def _newcomer(**settings: str) -> dict[str, str]:
    """A shell with no PHOTOSEARCH_ variable but these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    return env | settings


def _photosearch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "photosearch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


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
    env = _newcomer(
        PHOTOSEARCH_REDIS__URL=f"redis://127.0.0.1:{port}/0",
        PHOTOSEARCH_DATA_DIR=str(tmp_path / "data"),  # no `up` runs there
    )
    args = [str(photos) if arg == "PHOTOS" else arg for arg in command]
    result = _photosearch(*args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"the Redis at 127.0.0.1:{port}/0 is not PhotoSearch's" in result.stderr
    assert "PHOTOSEARCH_REDIS__URL" in result.stderr
    assert _contents(foreign) == before


def test_a_command_finds_the_up_running_on_its_data_directory_by_itself(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """up.json as a running `up` writes it (this test's process stands for its pid), its
    Redis marked as `up` marks it: no up.env sourced, no PHOTOSEARCH_REDIS__URL."""
    prefix = f"pstest-{uuid.uuid4().hex[:8]}"
    mark(redis, prefix, "up")
    data = tmp_path / "data"
    data.mkdir()
    up_env = {
        "PHOTOSEARCH_DATA_DIR": str(data),
        "PHOTOSEARCH_REDIS__URL": redis_url,
        "PHOTOSEARCH_REDIS__PREFIX": prefix,
    }
    state = {"pid": os.getpid(), "url": "", "children": {}, "env": up_env}
    (data / STATE_FILE).write_text(json.dumps(state))
    try:
        result = _photosearch("index", "status", env=_newcomer(PHOTOSEARCH_DATA_DIR=str(data)))
    finally:
        redis.delete(*redis.scan_iter(f"{prefix}*"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"using the `photosearch up` running on {data} (pid {os.getpid()}): Redis at {redis_url}"
    ]
    assert result.stdout.splitlines()[0] == "no jobs"
