"""core/deployment.py: the marker that names a Redis PhotoSearch's is only read by a check,
and a worker's presence expires unless renewed."""

from __future__ import annotations

import uuid

import pytest
from redis import Redis

from core.deployment import NotPhotoSearch, Presence, mark, marker_key, require, running_workers


def _keys(redis: Redis, prefix: str) -> set[bytes]:
    return set(redis.scan_iter(f"{prefix}*"))


def test_an_unmarked_redis_is_refused_and_left_as_it_was(redis: Redis) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    redis.set(f"{prefix}:theirs", "1")
    before = (redis.dbsize(), _keys(redis, prefix))
    with pytest.raises(NotPhotoSearch, match=f"holds no {prefix}:deployment key") as refused:
        require(redis, prefix)
    assert "PHOTOSEARCH_REDIS__URL" in str(refused.value)
    port = redis.connection_pool.connection_kwargs["port"]
    assert f"127.0.0.1:{port}/0" in str(refused.value)
    assert (redis.dbsize(), _keys(redis, prefix)) == before
    redis.delete(f"{prefix}:theirs")


def test_a_marked_redis_passes_and_a_worker_is_running_until_its_presence_expires(
    redis: Redis, redis_url: str
) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    mark(redis, prefix, "up")
    require(redis, prefix)
    assert redis.ttl(marker_key(prefix)) == -1  # the mark is for good
    assert running_workers(redis, prefix) == []  # `up` marks it, but is no worker

    presence = Presence(redis_url, prefix, ttl_s=30, name="w1")
    try:
        presence.renew()
    finally:
        presence.close()
    assert running_workers(redis, prefix) == ["w1"]
    assert 0 < redis.ttl(f"{prefix}:workers:w1") <= 30
    redis.delete(f"{prefix}:workers:w1")  # what its expiry does when no renewal comes
    assert running_workers(redis, prefix) == []
    redis.delete(marker_key(prefix))
