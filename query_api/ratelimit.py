"""Rate limits per caller: a token bucket per API key name, or per client address without a
key, kept in Redis so that every replica spends from the same one; 429 past it."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from redis.asyncio import Redis as AsyncRedis

from core.redisguard import RedisGuard
from core.settings_api import ApiSettings
from query_api.auth import ANONYMOUS
from query_api.errors import ApiError
from query_api.metrics import Metrics

# One atomic step of a bucket: refill for the time since the last step, then take `cost`.
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
  tokens = tokens - cost
  allowed = 1
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
end
return {allowed, tostring(tokens)}
"""
# The policy's name in the RateLimit headers: the searches are what is limited.
POLICY = "search"


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

    @property
    def until_token_s(self) -> float:
        """Seconds until the bucket holds a whole request again (0: it does now)."""
        return max(0.0, 1 - self.tokens) / self.limit.rate_per_s

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
        return Taken(bool(allowed), float(tokens), limit)


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
    what is left (r requests; t seconds until the next request is allowed when refused, until
    the bucket is full otherwise)."""
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

    async def admit(self, caller: str, address: str | None) -> dict[str, str]:
        """The headers to answer with, or ApiError 429 past the limit. Redis failing lets the
        request through (counted): losing the limits beats refusing everyone."""
        anonymous = caller == ANONYMOUS
        limit = self.anonymous if anonymous else self.by_key.get(caller)
        if limit is None:
            return {}
        bucket = address_bucket(address or "unknown") if anonymous else f"key:{caller}"
        taken = await self.buckets.take(bucket, limit)
        if taken is None:
            self.metrics.rate_limit_fail_open.inc()
            return {}
        if taken.allowed:
            return headers(taken)
        self.metrics.rate_limited.labels(caller).inc()
        retry_after = max(1, math.ceil(taken.until_token_s))
        who = "this address" if anonymous else f"the key {caller!r}"
        raise ApiError(
            429,
            f"too many searches from {who}: {limit.burst} at once and "
            f"{limit.rate_per_s:g} a second at most",
            headers={"Retry-After": str(retry_after), **headers(taken)},
        )
