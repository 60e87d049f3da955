"""The per-caller bound on fetches by URL, and whom a fetch counts against (the live fetches
are tested against local web servers in tests/system/test_api_image_url.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from query_api.http.auth import ANONYMOUS, Caller
from query_api.images.body import fetch_caller
from query_api.images.fetch import FetchError, FetchSlots


def test_a_caller_past_its_bound_is_a_429_and_others_are_not_counted_with_it() -> None:
    slots = FetchSlots(per_caller=2)
    with slots.held("key:app"), slots.held("key:app"):
        with pytest.raises(FetchError) as refused:
            with slots.held("key:app"):
                pass
        assert refused.value.status == 429 and refused.value.outcome == "caller_busy"
        assert refused.value.headers == {"Retry-After": "1"}
        with slots.held("addr:203.0.113.7"):
            assert slots.in_flight == {"key:app": 2, "addr:203.0.113.7": 1}
    assert slots.in_flight == {}


def test_a_slot_is_given_back_when_the_fetch_fails() -> None:
    slots = FetchSlots(per_caller=1)
    with pytest.raises(RuntimeError), slots.held("key:app"):
        raise RuntimeError("the server hung up")
    with slots.held("key:app"):
        assert slots.in_flight == {"key:app": 1}


def _request(caller: Caller | None, host: str | None) -> Any:
    state = SimpleNamespace(**({"caller": caller} if caller else {}))
    client = SimpleNamespace(host=host) if host else None
    return SimpleNamespace(state=state, client=client)


def test_a_fetch_counts_against_the_key_or_else_the_address_as_the_rate_limits_do() -> None:
    key = Caller("app-search", frozenset({"search"}))
    anonymous = Caller(ANONYMOUS, frozenset({"search"}))
    assert fetch_caller(_request(key, "203.0.113.7")) == "key:app-search"
    assert fetch_caller(_request(anonymous, "203.0.113.7")) == "addr:203.0.113.7"
    # One subscriber's IPv6 network is one caller, however many addresses it takes.
    assert fetch_caller(_request(anonymous, "2001:db8:1:2::5")) == "addr:2001:db8:1:2::/64"
    assert fetch_caller(_request(None, None)) == "addr:unknown"
