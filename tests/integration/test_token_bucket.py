"""The token bucket's Lua script against a real Valkey (the session's): what it allows,
refuses and refills, the keys it leaves behind, and failing open without Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis as AsyncRedis

from core.redisguard import RedisGuard
from harness.processes import free_ports
from query_api.http.ratelimit import Limit, Taken, TokenBuckets


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[AsyncRedis]:
    client = AsyncRedis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


def buckets_on(redis: AsyncRedis, errors: list[str] | None = None) -> TokenBuckets:
    guard = RedisGuard(2.0, 60.0, (errors if errors is not None else []).append)
    return TokenBuckets(redis, f"pstest-{uuid.uuid4().hex[:8]}", guard)


async def taken(buckets: TokenBuckets, bucket: str, limit: Limit) -> Taken:
    answer = await buckets.take(bucket, limit)
    assert answer is not None, "Redis answered"
    return answer


async def test_a_bucket_allows_its_burst_then_refuses_and_buckets_are_apart(
    redis: AsyncRedis,
) -> None:
    buckets = buckets_on(redis)
    slow = Limit(0.01, 3)  # one search per 100 s: nothing refills while the test runs
    answers = [await taken(buckets, "key:a", slow) for _ in range(4)]
    assert [a.allowed for a in answers] == [True, True, True, False]
    assert [int(a.tokens) for a in answers] == [2, 1, 0, 0]
    # The wait is for one whole token: at most 1/rate, less what refilled meanwhile.
    assert 90 < answers[3].until_token_s <= 100
    # Another bucket is untouched; the refusal spent nothing.
    assert (await taken(buckets, "key:b", slow)).tokens >= 2
    assert not (await taken(buckets, "key:a", slow)).allowed

    # The bucket expires once it would be full again: idle callers leave nothing behind.
    ttl_ms = await redis.pttl(buckets.key("key:a"))
    assert 0 < ttl_ms <= 3 / 0.01 * 1000 + 1000


async def test_a_bucket_refills_at_its_rate_up_to_its_burst(redis: AsyncRedis) -> None:
    buckets = buckets_on(redis)
    slow = Limit(0.01, 2)  # a token per 100 s: the milliseconds the test takes refill nothing
    assert [(await taken(buckets, "key:a", slow)).allowed for _ in range(2)] == [True, True]
    refused = await taken(buckets, "key:a", slow)
    assert not refused.allowed and 99 < refused.until_token_s <= 100
    # Redis's clock decides (replicas' clocks do not matter), so rather than wait the test
    # moves the bucket's stored time back, as that much waiting would (a refusal stores
    # nothing): half the wait refills half a token, the whole wait a token.
    key = buckets.key("key:a")

    async def waited(seconds: float) -> None:
        at = float(await redis.hget(key, "at") or 0)
        await redis.hset(key, "at", str(at - seconds))

    await waited(refused.until_token_s / 2)
    assert not (await taken(buckets, "key:a", slow)).allowed
    await waited(refused.until_token_s / 2 + 0.5)
    assert (await taken(buckets, "key:a", slow)).allowed

    # Long idle: full again, never more than the burst.
    await redis.hset(key, mapping={"tokens": "0"})
    await waited(10_000)
    answer = await taken(buckets, "key:a", slow)
    assert answer.allowed and answer.tokens == pytest.approx(slow.burst - 1, abs=0.01)


async def test_without_redis_nothing_is_checked_and_redis_is_skipped_a_while() -> None:
    (port,) = free_ports(1)  # nothing listens there
    dead = AsyncRedis.from_url(f"redis://127.0.0.1:{port}/0")
    errors: list[str] = []
    buckets = buckets_on(dead, errors)
    try:
        assert await buckets.take("key:a", Limit(1, 1)) is None
        assert errors == ["ratelimit: ConnectionError"]
        # Skipped, not tried again: a dead Redis costs no latency for retry_s.
        assert not buckets.guard.available
        assert await buckets.take("key:a", Limit(1, 1)) is None
        assert len(errors) == 1
    finally:
        await dead.aclose()
