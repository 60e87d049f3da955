"""Rate limits per caller: a token bucket per API key name, or per client address without a
key, kept in Redis so that every replica spends from the same one; 429 past it. A search
spends a token per unit of work it costs (`price`), and gets them back when it is refused
before any work was done."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from redis.asyncio import Redis as AsyncRedis
from starlette.datastructures import MutableHeaders

from core.embedding.errors import TritonQueueFull, TritonQueueTimeout
from core.redisguard import RedisGuard
from core.settings_api import ApiSettings
from query_api.http.auth import ANONYMOUS, Caller
from query_api.http.errors import ApiError
from query_api.http.metrics import Metrics

# One atomic step of a bucket: refill for the time since the last step, then take `cost`
# (a negative cost gives tokens back, up to the bucket's size).
# Redis's own clock (TIME), so replicas' clocks do not matter; the bucket expires once it
# would be full again (an absent bucket is a full one), so idle callers leave nothing behind.
# A refusal writes nothing: the stored state refills to the same value later.
_TAKE = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]), tonumber(state[2])
if tokens == nil or at == nil then
  tokens, at = burst, now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate)
  at = now
end
local allowed = 0
if tokens >= cost then
  tokens = math.min(burst, tokens - cost)
  allowed = 1
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
end
return {allowed, tostring(tokens)}
"""
# The policy's name in the RateLimit headers: the searches are what is limited.
POLICY = "search"
# Candidates re-ranked per token: the store's read of the pool, fusion, collapse and
# diversity grow with it. Full thousands only, so the default pool (100) costs nothing more.
RERANKED_PER_TOKEN = 1000


def price(embeddings: int, reranked: int) -> int:
    """Tokens one search spends: one per embedding it makes (the query text, each distinct
    `not` text, an image; cached or not, so that the price never tells whether another caller
    searched the phrase) and one per full thousand candidates it re-ranks; one at least (a
    search by stored vectors or by words alone still costs the store a query)."""
    return max(1, embeddings + reranked // RERANKED_PER_TOKEN)


@dataclass(frozen=True)
class Limit:
    """A token bucket: `burst` requests at once, refilled at `rate_per_s`."""

    rate_per_s: float
    burst: int

    @classmethod
    def of(cls, rate_per_s: float | None, burst: int | None) -> Limit | None:
        """The limit of these settings; None (no limit) without a rate."""
        if not rate_per_s:
            return None
        return cls(rate_per_s, burst if burst is not None else max(1, math.ceil(rate_per_s)))

    @property
    def window_s(self) -> int:
        """Seconds an empty bucket takes to fill: `burst` requests per this many seconds."""
        return max(1, math.ceil(self.burst / self.rate_per_s))


@dataclass(frozen=True)
class Taken:
    """One request's answer from its bucket."""

    allowed: bool
    tokens: float  # left after this request
    limit: Limit
    cost: int = 1  # what the request asked for

    @property
    def until_token_s(self) -> float:
        """Seconds until the bucket holds this request's cost again (0: it does now)."""
        return max(0.0, self.cost - self.tokens) / self.limit.rate_per_s

    @property
    def until_full_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, self.limit.burst - self.tokens) / self.limit.rate_per_s


class TokenBuckets:
    """The buckets in Redis: one script call per request, under the guard's deadline."""

    def __init__(self, redis: AsyncRedis, prefix: str, guard: RedisGuard) -> None:
        self.prefix = prefix
        self.guard = guard
        # EVALSHA, loading the script again if this Redis does not know it (a restart).
        self._take = redis.register_script(_TAKE)

    def key(self, bucket: str) -> str:
        return f"{self.prefix}:ratelimit:{bucket}"

    async def take(self, bucket: str, limit: Limit, cost: int = 1) -> Taken | None:
        """Take `cost` requests from the bucket; None when Redis failed or is being skipped
        after a failure (the caller lets the request through)."""
        if not self.guard.available:
            return None
        args = (limit.rate_per_s, limit.burst, cost)
        ok, answer = await self.guard.call("ratelimit", self._take([self.key(bucket)], args))
        if not ok or not isinstance(answer, list):
            return None
        allowed, tokens = answer
        return Taken(bool(allowed), float(tokens), limit, max(cost, 0))


def address_bucket(host: str) -> str:
    """The bucket of a caller without a key: its IPv4 address, or the /64 of its IPv6 one
    (one subscriber's network: a host can take a new address within it at will)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"addr:{host[:64]}"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"addr:{address.ipv4_mapped}"
        return f"addr:{ipaddress.IPv6Network((address, 64), strict=False)}"
    return f"addr:{address}"


def headers(taken: Taken) -> dict[str, str]:
    """The RateLimit header fields of draft-ietf-httpapi-ratelimit-headers (-10, -11): the
    policy (q requests per w seconds: the bucket's size and the time it takes to fill) and
    what is left (r requests; t seconds until the refused request would be allowed, until the
    bucket is full otherwise). A request is a token: a search spends its price in them."""
    limit = taken.limit
    wait = taken.until_full_s if taken.allowed else taken.until_token_s
    return {
        "RateLimit-Policy": f'"{POLICY}";q={limit.burst};w={limit.window_s}',
        "RateLimit": f'"{POLICY}";r={math.floor(taken.tokens)};t={math.ceil(wait)}',
    }


class RateLimits:
    """The limits of the configured keys and of anonymous callers, applied to a request."""

    def __init__(self, buckets: TokenBuckets, api: ApiSettings, metrics: Metrics) -> None:
        self.buckets = buckets
        self.metrics = metrics
        # By name: a key's old and new secret (a rotation) spend from one bucket.
        self.by_key = {k.name: Limit.of(k.rate_per_s, k.burst) for k in api.keys}
        self.anonymous = Limit.of(api.anonymous_rate_per_s, api.anonymous_burst)

    def _bucket(self, caller: str, address: str | None) -> tuple[str, Limit] | None:
        anonymous = caller == ANONYMOUS
        limit = self.anonymous if anonymous else self.by_key.get(caller)
        if limit is None:
            return None
        return (address_bucket(address or "unknown") if anonymous else f"key:{caller}"), limit

    async def admit(self, caller: str, address: str | None, cost: int = 1) -> dict[str, str]:
        """Take `cost` tokens: the headers to answer with, or ApiError 429 past the limit.
        A cost above the bucket's size takes the whole bucket (a caller whose burst is
        smaller than a search's price may still make it, once the bucket is full). Redis
        failing lets the request through (counted): losing the limits beats refusing
        everyone."""
        found = self._bucket(caller, address)
        if found is None:
            return {}
        bucket, limit = found
        cost = min(cost, limit.burst)
        taken = await self.buckets.take(bucket, limit, cost)
        if taken is None:
            self.metrics.rate_limit_fail_open.inc()
            return {}
        if taken.allowed:
            return headers(taken)
        self.metrics.rate_limited.labels(caller).inc()
        retry_after = max(1, math.ceil(taken.until_token_s))
        who = "this address" if caller == ANONYMOUS else f"the key {caller!r}"
        priced = (
            f"; this search costs {cost} (one per embedding, one per thousand candidates re-ranked)"
            if cost > 1
            else ""
        )
        raise ApiError(
            429,
            f"too many searches from {who}: {limit.burst} at once and "
            f"{limit.rate_per_s:g} a second at most{priced}",
            headers={"Retry-After": str(retry_after), **headers(taken)},
        )

    async def refund(self, caller: str, address: str | None, cost: int) -> None:
        """Give back what `admit` took for a request refused before any work was done."""
        found = self._bucket(caller, address)
        if found is not None:
            bucket, limit = found
            await self.buckets.take(bucket, limit, -min(cost, limit.burst))


# Answers that refuse a search before any work was done for it: it costs nothing. By code:
# the replica's overload (admission, shedding) and a caller's URL fetches at their bound.
_REFUSED_BEFORE_WORK = (TritonQueueFull, TritonQueueTimeout)
_REFUSED_CODES = frozenset({"overloaded", "too_many_fetches"})


class Meter:
    """One request's spending from its caller's bucket: `paying(cost)` around its work."""

    def __init__(
        self,
        limits: RateLimits,
        caller: Caller,
        address: str | None,
        answer_headers: MutableHeaders,
    ) -> None:
        self.limits = limits
        self.caller = caller
        self.address = address
        self.answer_headers = answer_headers

    @asynccontextmanager
    async def paying(self, cost: int) -> AsyncIterator[None]:
        """Take `cost` tokens (429 past the limit, taking none), run the work, and give them
        back if it was refused before any was done (admission's 503, Triton's queue full,
        the caller's URL fetches at their bound): a refused search costs nothing."""
        taken = await self.limits.admit(self.caller.name, self.address, cost)
        self.answer_headers.update(taken)
        try:
            yield
        except (ApiError, *_REFUSED_BEFORE_WORK) as exc:
            refused = not isinstance(exc, ApiError) or exc.code in _REFUSED_CODES
            if refused and taken:  # nothing to give back when nothing was counted
                await self.limits.refund(self.caller.name, self.address, cost)
            raise
