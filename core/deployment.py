"""Which Redis is PhotoSearch's: a marker that its workers and `up` write, which a command reads
(and only reads) before it writes anything; and which workers are running, so a query that
only a worker can answer is not left waiting in a queue that no one reads."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class NotPhotoSearch(Exception):
    """The Redis the settings point at holds no marker: nothing may be written there."""


def marker_key(prefix: str) -> str:
    return f"{prefix}:deployment"


def _worker_key(prefix: str, name: str) -> str:
    return f"{prefix}:workers:{name}"


def mark(
    redis: Redis,
    prefix: str,
    by: str,
    *,
    worker: str | None = None,
    ttl_s: float = 90.0,
    now: Callable[[], float] = time.time,
) -> None:
    """Name this Redis PhotoSearch's, for good (its workers and `up` call this as they start);
    a worker also says it is running, for `ttl_s` unless it says so again.

    Args:
        redis: PhotoSearch's own Redis (the broker's, where the job records are).
        prefix: PHOTOSEARCH_REDIS__PREFIX.
        by: who marks it ("worker", "up"), for whoever reads the key.
        worker: the worker's name; None: no presence is written.
        ttl_s: how long the presence lasts without being renewed.
        now: the clock of the record.
    """
    with redis.pipeline() as pipe:
        pipe.set(marker_key(prefix), json.dumps({"by": by, "at": now()}))
        if worker is not None:
            pipe.set(_worker_key(prefix, worker), now(), ex=max(1, round(ttl_s)))
        pipe.execute()


def address(redis: Redis) -> str:
    """host:port/db of a client, never its password."""
    kwargs = redis.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def require(redis: Redis, prefix: str) -> None:
    """Raise NotPhotoSearch unless the marker is there. Reads one key, writes nothing.

    Raises:
        NotPhotoSearch: with the line to show the operator.
        redis.exceptions.RedisError: it could not be asked.
    """
    if redis.exists(marker_key(prefix)):
        return
    raise NotPhotoSearch(
        f"the Redis at {address(redis)} is not PhotoSearch's: it holds no {marker_key(prefix)} "
        "key, which PhotoSearch's workers and `photosearch up` write (nothing was written to "
        "it). Point PHOTOSEARCH_REDIS__URL at PhotoSearch's Redis (`photosearch up` writes "
        "DATA_DIR/up.env), or start a worker against this one first."
    )


def running_workers(redis: Redis, prefix: str) -> list[str]:
    """The names of the workers that said lately that they are running (read-only)."""
    start = len(_worker_key(prefix, ""))
    found = redis.scan_iter(match=_worker_key(prefix, "*"), count=1000)
    return sorted(key.decode()[start:] if isinstance(key, bytes) else key[start:] for key in found)


class Presence:
    """A worker's marker and presence, renewed on its own schedule; a failure is logged, never
    raised: with Redis down, the next round tries again."""

    def __init__(self, url: str, prefix: str, ttl_s: float, name: str | None = None) -> None:
        self.redis = Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"

    def renew(self) -> None:
        try:
            mark(self.redis, self.prefix, "worker", worker=self.name, ttl_s=self.ttl_s)
        except RedisError as exc:
            log.warning("could not mark the Redis as PhotoSearch's: %s", exc)

    def close(self) -> None:
        self.redis.close()
