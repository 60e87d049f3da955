"""Popular queries for suggestions: each text query's searches and its distinct sessions, per
period, counted in the search log's write and read by the API's suggestions.

Only what several sessions searched may be suggested to anyone (query_api/suggest/suggestions.py),
so each query's sessions are counted in a HyperLogLog: it holds no session id, only register
maxima of their hashes, 12 KB at most and tens of bytes for a few sessions, and it never
counts more sessions than there were (two may share a register: fewer, never more).

Counts are kept per period of half the feedback retention, and a period's keys expire at the
end of the next one: what a search left is gone within the retention, and a reader sees the
current period and the one before (their larger session count: never a sum, which could
count one session twice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.client import Pipeline

# A longer query is no completion of anything a person types into a search box.
MAX_QUERY_CHARS = 100
# Commands per pipelined round trip of the readers: a round trip stays far under the
# client's deadline however many queries are read.
CHUNK = 1000


@dataclass(frozen=True)
class PopularQuery:
    """A normalized query, how many sessions searched it (the larger count of the two periods
    read) and how many searches (both periods)."""

    text: str
    sessions: int
    searches: int


class Searched(Protocol):
    """What the counts read of a search: the search log's SearchRecord, which writes them with
    its record (core/feedback/searchlog.py imports this module, so this one names no type of
    that one)."""

    @property
    def kind(self) -> str: ...
    @property
    def query(self) -> str | None: ...
    @property
    def offset(self) -> int: ...
    @property
    def session(self) -> str | None: ...
    @property
    def shown(self) -> Sequence[str]: ...
    @property
    def at(self) -> float: ...


def period_s(retention_s: int) -> int:
    return max(1, retention_s // 2)


def period_of(at: float, retention_s: int) -> int:
    return int(at // period_s(retention_s))


def queries_key(prefix: str, period: int) -> str:
    """The period's sorted set of normalized query -> searches."""
    return f"{prefix}:suggest:{period}:queries"


def sessions_key(prefix: str, period: int, query: str) -> str:
    """The period's HyperLogLog of the sessions that searched the query."""
    digest = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}:suggest:{period}:sessions:{digest}"


def counted(record: Searched) -> bool:
    """Whether a search counts for suggestions: a text query's first page that showed
    something, from a session. A search without a session counts for nothing: its sessions
    could not be told apart."""
    return (
        record.kind == "text"
        and record.offset == 0
        and record.session is not None
        and bool(record.query)
        and len(record.query or "") <= MAX_QUERY_CHARS
        and bool(record.shown)
    )


def queue_count(pipe: Pipeline, prefix: str, record: Searched, retention_s: int) -> None:
    """Queue the search's counts on the search log's pipeline (the same round trip)."""
    if not counted(record) or record.query is None or record.session is None:
        return
    period = period_of(record.at, retention_s)
    # Read while its period or the next is the current one, then gone: within the retention.
    ttl_s = max(1, int((period + 2) * period_s(retention_s) - record.at))
    queries, sessions = queries_key(prefix, period), sessions_key(prefix, period, record.query)
    pipe.zincrby(queries, 1, record.query)
    pipe.expire(queries, ttl_s)
    pipe.pfadd(sessions, record.session)
    pipe.expire(sessions, ttl_s)


def _text(member: bytes | str) -> str:
    return member.decode() if isinstance(member, bytes) else str(member)


async def _top(redis: AsyncRedis, key: str, n: int) -> dict[str, int]:
    """The n most searched queries of a period's set, read a chunk at a time."""
    found: dict[str, int] = {}
    for start in range(0, n, CHUNK * 5):
        stop = min(n, start + CHUNK * 5) - 1
        page: list[tuple[bytes, float]] = await redis.zrevrange(  # type: ignore[assignment]
            key, start, stop, withscores=True
        )
        found.update((_text(member), int(score)) for member, score in page)
        if len(page) < stop - start + 1:
            break
    return found


async def _sessions(redis: AsyncRedis, keys: Sequence[str]) -> list[int]:
    counts: list[int] = []
    for start in range(0, len(keys), CHUNK):
        pipe = redis.pipeline(transaction=False)
        for key in keys[start : start + CHUNK]:
            pipe.pfcount(key)
        counts.extend(int(n) for n in await pipe.execute())
    return counts


async def read_popular(
    redis: AsyncRedis,
    prefix: str,
    *,
    now: float,
    retention_s: int,
    limit: int,
    min_sessions: int,
) -> list[PopularQuery]:
    """The `limit` queries searched most that at least `min_sessions` sessions searched in one
    of the two periods read: most sessions first, then most searches, then by text."""
    if limit <= 0:
        return []
    current = period_of(now, retention_s)
    periods = (current, current - 1)
    searches: dict[str, int] = {}
    for period in periods:
        for text, n in (await _top(redis, queries_key(prefix, period), limit)).items():
            searches[text] = searches.get(text, 0) + n
    # A query searched fewer times than that cannot have been searched by enough sessions.
    candidates = [text for text, n in searches.items() if n >= min_sessions]
    keys = [sessions_key(prefix, p, text) for text in candidates for p in periods]
    counts = await _sessions(redis, keys)
    popular = []
    for i, text in enumerate(candidates):
        sessions = max(counts[2 * i], counts[2 * i + 1])
        if sessions >= min_sessions:
            popular.append(PopularQuery(text, sessions, searches[text]))
    popular.sort(key=lambda q: (-q.sessions, -q.searches, q.text))
    return popular[:limit]


async def trim(redis: AsyncRedis, prefix: str, *, now: float, retention_s: int, keep: int) -> int:
    """Bound the current period's set: past 2 * keep queries, drop the least searched down to
    keep, with their sessions' counts; returns how many were dropped. A newcomer has the time
    the set takes to grow back from keep to 2 * keep to climb above the least searched."""
    key = queries_key(prefix, period_of(now, retention_s))
    size = int(await redis.zcard(key))
    if size <= 2 * max(keep, 1):
        return 0
    period = period_of(now, retention_s)
    lowest: list[bytes] = await redis.zrange(key, 0, size - keep - 1)  # type: ignore[assignment]
    dropped = [_text(m) for m in lowest]
    for start in range(0, len(dropped), CHUNK):
        chunk = dropped[start : start + CHUNK]
        pipe = redis.pipeline(transaction=False)
        pipe.zrem(key, *chunk)
        pipe.delete(*(sessions_key(prefix, period, text) for text in chunk))
        await pipe.execute()
    return len(dropped)
