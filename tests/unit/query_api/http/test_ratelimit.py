"""A bucket's limit from the settings, its buckets per address, the RateLimit header fields
of draft-ietf-httpapi-ratelimit-headers it answers with, and a search's price, spent from a
bucket in the session's Redis and given back when the search was refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis as AsyncRedis
from starlette.datastructures import MutableHeaders

from core.redisguard import RedisGuard
from core.settings_api import ApiSettings
from query_api.http.auth import Caller
from query_api.http.errors import ApiError
from query_api.http.metrics import Metrics
from query_api.http.ratelimit import (
    Limit,
    Meter,
    RateLimits,
    Taken,
    TokenBuckets,
    address_bucket,
    headers,
    price,
)

SHA = "0" * 64


def test_a_limit_needs_a_rate_and_its_burst_defaults_to_the_rate_rounded_up() -> None:
    assert Limit.of(None, None) is None
    assert Limit.of(0, None) is None  # ANONYMOUS_RATE_PER_S=0: no limit
    assert Limit.of(2.5, None) == Limit(2.5, 3)
    assert Limit.of(0.1, None) == Limit(0.1, 1)
    assert Limit.of(5, 20) == Limit(5, 20)
    assert Limit(5, 20).window_s == 4 and Limit(0.3, 1).window_s == 4


def test_keys_settings_refuse_a_burst_without_rate_and_two_limits_for_one_name() -> None:
    ApiSettings(keys=[{"name": "a", "sha256": SHA, "rate_per_s": 2, "burst": 5}])
    with pytest.raises(ValidationError, match="burst needs rate_per_s"):
        ApiSettings(keys=[{"name": "a", "sha256": SHA, "burst": 5}])
    with pytest.raises(ValidationError, match="share one limit"):
        ApiSettings(
            keys=[
                {"name": "a", "sha256": SHA, "rate_per_s": 2},
                {"name": "a", "sha256": "1" * 64, "rate_per_s": 3},
            ]
        )


def test_the_headers_say_the_policy_what_is_left_and_when() -> None:
    limit = Limit(5, 20)
    allowed = headers(Taken(True, 17.4, limit))
    assert allowed == {
        "RateLimit-Policy": '"search";q=20;w=4',
        # 17 whole searches left; the bucket is full again in (20 - 17.4) / 5 = 0.52 s.
        "RateLimit": '"search";r=17;t=1',
    }
    # Refused: t is the wait for the next search, what Retry-After says.
    refused = headers(Taken(False, 0.2, Limit(0.1, 3)))
    assert refused == {"RateLimit-Policy": '"search";q=3;w=30', "RateLimit": '"search";r=0;t=8'}


def test_anonymous_buckets_are_per_ipv4_address_and_per_ipv6_network() -> None:
    assert address_bucket("198.51.100.7") == "addr:198.51.100.7"
    assert address_bucket("::ffff:198.51.100.7") == "addr:198.51.100.7"
    # One subscriber's /64: a host picks new addresses in it at will.
    assert address_bucket("2001:db8:1:2::1") == address_bucket("2001:db8:1:2:ffff::9")
    assert address_bucket("2001:db8:1:2::1") == "addr:2001:db8:1:2::/64"
    assert address_bucket("2001:db8:1:3::1") != address_bucket("2001:db8:1:2::1")


def test_a_search_costs_a_token_per_embedding_and_per_thousand_candidates_re_ranked() -> None:
    assert price(1, 100) == 1  # the default search: the query's embedding, a pool of 100
    assert price(6, 100) == 6  # a query and five `not` texts
    assert price(0, 0) == 1  # more like this, words alone: one at least
    assert price(0, 999) == 1
    assert price(1, 10_101) == 11  # collapsed at offset 10,000: ten thousands re-ranked
    assert price(6, 2_000) == 8


def test_a_refused_searchs_wait_is_for_its_whole_cost() -> None:
    # 2.5 tokens left at 0.5 a second: a search of 6 waits 7 s, one of 1 none.
    assert Taken(False, 2.5, Limit(0.5, 10), cost=6).until_token_s == 7
    assert headers(Taken(False, 2.5, Limit(0.5, 10), cost=6))["RateLimit"] == '"search";r=2;t=7'
    assert Taken(True, 2.5, Limit(0.5, 10)).until_token_s == 0


@pytest.fixture
async def meter(redis_url: str) -> AsyncIterator[Meter]:
    """A key's meter over the session's Redis: 10 tokens, one back per 100 s (nothing refills
    while the test runs)."""
    redis = AsyncRedis.from_url(redis_url)
    key = {"name": "app", "sha256": SHA, "rate_per_s": 0.01, "burst": 10}
    limits = RateLimits(
        TokenBuckets(redis, f"test-{uuid.uuid4().hex}", RedisGuard(30.0, 1.0)),
        ApiSettings(keys=[key]),
        Metrics(),
    )
    try:
        yield Meter(limits, Caller("app", frozenset({"search"})), None, MutableHeaders())
    finally:
        await redis.aclose()


def left(meter: Meter) -> str:
    return meter.answer_headers["RateLimit"]


async def test_a_search_spends_its_price_and_a_refusal_costs_nothing(meter: Meter) -> None:
    async with meter.paying(6):
        pass
    assert left(meter) == '"search";r=4;t=600'
    # Refused for overload before any work (admission's 503): the tokens come back.
    with pytest.raises(ApiError):
        async with meter.paying(3):
            raise ApiError(503, "busy", code="overloaded")
    # So is a search by URL refused because the caller's fetches are at their bound.
    with pytest.raises(ApiError):
        async with meter.paying(2):
            raise ApiError(429, "fetching 4 already", code="too_many_fetches")
    async with meter.paying(1):
        pass
    assert left(meter).startswith('"search";r=3;')
    # Past the limit: 429, naming the price, and nothing taken.
    with pytest.raises(ApiError) as refused:
        async with meter.paying(6):
            pass
    assert refused.value.status == 429
    assert "this search costs 6" in refused.value.message
    # A failure after the work began (here a 404) is paid for.
    with pytest.raises(ApiError):
        async with meter.paying(1):
            raise ApiError(404, "no photo")
    async with meter.paying(1):
        pass
    assert left(meter).startswith('"search";r=1;')


async def test_a_price_above_the_burst_takes_the_whole_bucket(meter: Meter) -> None:
    async with meter.paying(25):
        pass
    assert left(meter).startswith('"search";r=0;')
