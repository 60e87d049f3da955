"""A bucket's limit from the settings, its buckets per address, and the RateLimit header
fields of draft-ietf-httpapi-ratelimit-headers it answers with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.settings_api import ApiSettings
from query_api.ratelimit import Limit, Taken, address_bucket, headers

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
