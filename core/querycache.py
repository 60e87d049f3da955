"""The query-embedding cache in Redis, keyed by (model version, normalized query); query counts.

The API reads and fills it; before a reindex switches the live alias, the indexer embeds the
most popular recent queries with the new model version, so the switch starts with a warm cache.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from core.embedding.arrays import Embeddings
from core.redisguard import RedisGuard

_SPACES = re.compile(r"\s+")
# A popular query counts for this many days; one sorted set per day, kept a day longer.
_POPULAR_KEEP_S = 86400


def normalize_query(text: str) -> str:
    """The cache's form of a query; CLIP's tokenizer lowercases and collapses whitespace too,
    so the normalized text embeds exactly like the text the user typed."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip().lower()


def cache_key(prefix: str, model_version: int, normalized: str) -> str:
    # The API refuses lone surrogates (query_api.schemas.search); a key made of one by any other
    # caller is still a key, not a UnicodeEncodeError.
    digest = hashlib.sha256(normalized.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"{prefix}:qcache:v{model_version}:{digest}"


def popular_key(prefix: str, day: datetime) -> str:
    return f"{prefix}:qpopular:{day:%Y%m%d}"


def _to_bytes(vector: Embeddings) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _from_bytes(data: bytes) -> Embeddings | None:
    if not data or len(data) % 4:
        return None
    return np.frombuffer(data, dtype="<f4").copy()


class QueryCache:
    """The API's side: get, put and count queries; every call has a deadline and never raises.

    Redis is an optimization here: when it fails or is slow, searches go on without it, and
    for `retry_s` after a failure no call is tried at all, so a dead Redis costs no latency
    (core.redisguard).
    """

    def __init__(
        self,
        redis: AsyncRedis,
        prefix: str,
        *,
        ttl_s: int,
        timeout_s: float,
        retry_s: float,
        popular_days: int,
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.popular_days = popular_days
        # Whoever else uses this Redis (the API's rate limits) shares the guard: one failure
        # and all of them skip Redis for `retry_s`.
        self.guard = RedisGuard(timeout_s, retry_s, on_error)

    @property
    def available(self) -> bool:
        """False while a recent failure keeps the cache bypassed."""
        return self.guard.available

    async def _call(self, operation: str, call: Awaitable[object]) -> tuple[bool, object]:
        return await self.guard.call(operation, call)

    async def get(self, model_version: int, normalized: str) -> tuple[Embeddings | None, str]:
        """The cached embedding (or None) and how the lookup went: hit, miss or bypass."""
        if not self.available:
            return None, "bypass"
        ok, data = await self._call(
            "get", self.redis.get(cache_key(self.prefix, model_version, normalized))
        )
        if not ok:
            return None, "bypass"
        vector = _from_bytes(data) if isinstance(data, bytes) else None
        return vector, "miss" if vector is None else "hit"

    async def get_and_count(
        self, model_version: int, normalized: str
    ) -> tuple[Embeddings | None, str]:
        """`get` and `count` in one round trip (a pipeline): what a text search does."""
        if not self.available:
            return None, "bypass"
        key = popular_key(self.prefix, datetime.now(UTC))
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(cache_key(self.prefix, model_version, normalized))
        pipe.zincrby(key, 1, normalized)
        pipe.expire(key, self.popular_days * 86400 + _POPULAR_KEEP_S)
        ok, replies = await self._call("get", pipe.execute())
        if not ok or not isinstance(replies, list) or not replies:
            return None, "bypass"
        data = replies[0]
        vector = _from_bytes(data) if isinstance(data, bytes) else None
        return vector, "miss" if vector is None else "hit"

    async def put(self, model_version: int, normalized: str, vector: Embeddings) -> None:
        if self.available:
            key = cache_key(self.prefix, model_version, normalized)
            await self._call("set", self.redis.set(key, _to_bytes(vector), ex=self.ttl_s))

    async def count(self, normalized: str) -> None:
        """One more search of this query today (what the pre-warm before a switch reads)."""
        if not self.available:
            return
        key = popular_key(self.prefix, datetime.now(UTC))
        pipe = self.redis.pipeline(transaction=False)
        pipe.zincrby(key, 1, normalized)
        pipe.expire(key, self.popular_days * 86400 + _POPULAR_KEEP_S)
        await self._call("count", pipe.execute())

    async def get_bytes(self, key: str) -> bytes | None:
        """Any other cached value (thumbnails), under the same deadline and bypass."""
        if not self.available:
            return None
        ok, data = await self._call("get", self.redis.get(key))
        return data if ok and isinstance(data, bytes) else None

    async def put_bytes(self, key: str, data: bytes, ttl_s: int) -> None:
        if self.available:
            await self._call("set", self.redis.set(key, data, ex=ttl_s))

    async def ping(self) -> bool:
        ok, _ = await self._call("ping", self.redis.ping())
        return ok


def popular_queries(redis: Redis, prefix: str, days: int, n: int) -> list[str]:
    """The n most searched normalized queries of the last `days` days, most searched first."""
    if n <= 0:
        return []
    today = datetime.now(UTC)
    totals: dict[str, float] = {}
    for back in range(days):
        day = popular_key(prefix, today - timedelta(days=back))
        # Each day's own top is enough: a query outside every day's top n*2 cannot reach the top n
        # in practice, and reading whole sets would cost O(all queries).
        top: list[tuple[bytes, float]] = redis.zrevrange(  # type: ignore[assignment]
            day, 0, 2 * n - 1, withscores=True
        )
        for member, score in top:
            text = member.decode() if isinstance(member, bytes) else str(member)
            totals[text] = totals.get(text, 0.0) + float(score)
    return sorted(totals, key=lambda text: (-totals[text], text))[:n]


def prewarm(
    redis: Redis,
    prefix: str,
    model_version: int,
    embed: Callable[[Sequence[str]], Embeddings],
    *,
    days: int,
    n: int,
    ttl_s: int,
    batch: int = 64,
) -> int:
    """Embed the popular recent queries with `model_version` and cache them; returns how many."""
    queries = popular_queries(redis, prefix, days, n)
    for start in range(0, len(queries), batch):
        chunk = queries[start : start + batch]
        vectors = embed(chunk)
        pipe = redis.pipeline(transaction=False)
        for text, vector in zip(chunk, vectors, strict=True):
            pipe.set(cache_key(prefix, model_version, text), _to_bytes(vector), ex=ttl_s)
        pipe.execute()
    return len(queries)
