"""The record of each search: what was asked and which photos it showed, kept in Redis for the
retention under its unguessable search id, so that an event can name the search it is about and
the click model knows what was shown above a click.

A record holds no personal data: no address, no API key, no user agent; only the per-session
random id a caller chose to send. Records live in the persistent Redis (PHOTOSEARCH_REDIS__URL):
they are data, not a cache, and an evicting cache Redis would lose them silently.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.client import Pipeline

from core.feedback.suggestlog import queue_count
from core.redisguard import RedisGuard

# 16 random bytes, URL-safe base64: 22 characters nobody can guess or enumerate.
SEARCH_ID_PATTERN = r"^[A-Za-z0-9_-]{22}$"
# A session id is random and chosen by the caller (the page makes a UUID per tab): long enough
# that two sessions never collide, and no room for an e-mail address or a name.
SESSION_PATTERN = r"^[A-Za-z0-9_-]{16,64}$"

Kind = Literal["text", "image", "similar", "recommend"]
Side = Literal["live", "candidate", "both"]


def new_search_id() -> str:
    return secrets.token_urlsafe(16)


class SearchRecord(BaseModel):
    """One search as the log keeps it; `shown[i]` was shown at rank `offset + i + 1`."""

    model_config = ConfigDict(frozen=True)

    search_id: str = Field(pattern=SEARCH_ID_PATTERN)
    kind: Kind = "text"
    query: str | None = Field(None, description="A text search's normalized query; else none.")
    mode: str | None = None
    collection: str
    model_version: int
    shown: list[str]
    offset: int = Field(0, ge=0)
    session: str | None = Field(None, pattern=SESSION_PATTERN)
    at: float = Field(description="When it was searched, in seconds since the epoch.")
    # An interleaved experiment's page: which ranking contributed each shown result.
    sides: list[Side] | None = None

    def rank_of(self, photo_id: str) -> int | None:
        """The rank (1 = the first result of the first page) this search showed the photo at."""
        try:
            return self.offset + self.shown.index(photo_id) + 1
        except ValueError:
            return None


def record_key(prefix: str, search_id: str) -> str:
    return f"{prefix}:feedback:search:{search_id}"


def searches_key(prefix: str) -> str:
    """The stream of search ids in the order they were searched (what analytics reads)."""
    return f"{prefix}:feedback:searches"


def min_id(now: float, retention_s: int) -> str:
    """The oldest stream id kept: entries older than the retention are trimmed."""
    return str(max(0, int((now - retention_s) * 1000)))


# Append to a stream at the writer's clock (its id: that time in milliseconds, or the last
# entry's if a replica's clock lags), trimming first what is past the retention. The id is
# the writer's `now`, not Redis's, so a test's clock decides what expires, as in production.
_APPEND = """
local now = tonumber(ARGV[1])
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #top > 0 then
  local last = tonumber(string.match(top[1][1], '^(%d+)'))
  if last > now then now = last end
end
redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2])
return redis.call('XADD', KEYS[1], string.format('%.0f', now) .. '-*', unpack(ARGV, 3))
"""


def append(
    pipe: Pipeline, stream: str, fields: dict[str, str], *, now: float, retention_s: int
) -> None:
    """Queue one entry's append to `stream` on the pipeline (core.feedback.events uses it)."""
    flat = [part for item in fields.items() for part in item]
    pipe.eval(_APPEND, 1, stream, str(int(now * 1000)), min_id(now, retention_s), *flat)


def _queue_record(pipe: Pipeline, prefix: str, record: SearchRecord, ttl_s: int) -> None:
    pipe.set(record_key(prefix, record.search_id), record.model_dump_json(), ex=ttl_s)
    append(pipe, searches_key(prefix), {"id": record.search_id}, now=record.at, retention_s=ttl_s)
    # What suggestions read of it, in the same round trip (core/feedback/suggestlog.py).
    queue_count(pipe, prefix, record, ttl_s)


async def record_search(redis: AsyncRedis, prefix: str, record: SearchRecord, ttl_s: int) -> None:
    """Keep the record for `ttl_s` seconds: one pipelined round trip."""
    pipe = redis.pipeline(transaction=False)
    _queue_record(pipe, prefix, record, ttl_s)
    await pipe.execute()


async def load_search(
    redis: AsyncRedis, prefix: str, search_id: str, *, now: float | None = None, ttl_s: int = 0
) -> SearchRecord | None:
    """The record of a search, or None: unknown, expired (by Redis's TTL, or by `now` when
    given with the retention `ttl_s`), or unreadable."""
    data = await redis.get(record_key(prefix, search_id))
    return _parsed(data, now, ttl_s)


async def load_searches(
    redis: AsyncRedis, prefix: str, search_ids: Sequence[str], *, now: float, ttl_s: int
) -> dict[str, SearchRecord]:
    """The records of these searches still kept, by id, in one round trip."""
    unique = list(dict.fromkeys(search_ids))
    if not unique:
        return {}
    found = await redis.mget([record_key(prefix, s) for s in unique])
    return {
        record.search_id: record
        for data in found
        if (record := _parsed(data, now, ttl_s)) is not None
    }


def _parsed(data: object, now: float | None, ttl_s: int) -> SearchRecord | None:
    if not isinstance(data, (bytes, str)):
        return None
    try:
        record = SearchRecord.model_validate_json(data)
    except ValueError:
        return None
    if now is not None and record.at < now - ttl_s:
        return None
    return record


def read_searches(
    redis: Redis, prefix: str, *, since: float, now: float, ttl_s: int, chunk: int = 500
) -> Iterator[SearchRecord]:
    """The records of the searches made since `since` (seconds since the epoch), oldest
    first; for the command line, on a plain client."""
    start = min_id(since, 0)
    while True:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = redis.xrange(  # type: ignore[assignment]
            searches_key(prefix), min=start, count=chunk
        )
        if not entries:
            return
        ids = [fields[b"id"].decode() for _, fields in entries]
        found: list[object] = redis.mget([record_key(prefix, s) for s in ids])  # type: ignore[assignment]
        for data in found:
            record = _parsed(data, now, ttl_s)
            if record is not None and record.at >= since:
                yield record
        if len(entries) < chunk:
            return
        start = "(" + entries[-1][0].decode()


class SearchLog:
    """The API's writer of the log: under the Redis guard's deadline, never raising, so a
    failing Redis loses a record (counted by the guard's `on_error`) but never a search."""

    def __init__(
        self,
        redis: AsyncRedis,
        prefix: str,
        *,
        retention_s: int,
        guard: RedisGuard,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.retention_s = retention_s
        self.guard = guard
        self.now = now

    async def write(self, record: SearchRecord) -> bool:
        """Keep the record; False when Redis failed or is skipped after a failure."""
        if not self.guard.available:
            return False
        ok, _ = await self.guard.call(
            "searchlog", record_search(self.redis, self.prefix, record, self.retention_s)
        )
        return ok

    async def load(self, search_ids: Sequence[str]) -> dict[str, SearchRecord]:
        """The records of these searches still kept (events name them)."""
        return await load_searches(
            self.redis, self.prefix, search_ids, now=self.now(), ttl_s=self.retention_s
        )
