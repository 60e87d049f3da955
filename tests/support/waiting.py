"""Waiting for an event: poll it until it holds, under a ceiling that only bounds a hang.

The tests' only sleeps are here (tests/unit/test_suite_rules.py holds them to it): a test
never sleeps for a while and hopes, it waits for what it needs (a job state, a log line, a
port, a counter) and fails, saying what it waited for, once the ceiling has passed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Short: an event is seen a few milliseconds after it happens, and a poll is cheap.
POLL_S = 0.05


def _said(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


def wait_until(
    check: Callable[[], T | None],
    timeout_s: float,
    what: str | Callable[[], str],
    *,
    every_s: float = POLL_S,
) -> T:
    """The first true value `check()` returns, asked every `every_s`. Past `timeout_s`, an
    AssertionError with `what` (a callable is called then: a log's tail, the last record).
    A check may raise to give up early (the process it waits on has exited)."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {_said(what)}")
        time.sleep(every_s)
    return value


async def await_until(
    check: Callable[[], Awaitable[T | None]],
    timeout_s: float,
    what: str | Callable[[], str],
    *,
    every_s: float = POLL_S,
) -> T:
    """`wait_until` on an event loop: the first true value `await check()` gives."""
    deadline = time.monotonic() + timeout_s
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {_said(what)}")
        await asyncio.sleep(every_s)
    return value
