"""Redis as an aid, never a dependency: calls with a deadline that never raise, and none tried
for a while after one failed, so a dead or slow Redis costs no latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

T = TypeVar("T")


class RedisGuard:
    """The deadline and the back-off that the users of one Redis (the API's query cache, its
    rate limits) share: when one call fails, the others skip Redis too for `retry_s`."""

    def __init__(
        self, timeout_s: float, retry_s: float, on_error: Callable[[str], None] = lambda _: None
    ) -> None:
        """Args:
        timeout_s: deadline of one call.
        retry_s: after a failure, how long `available` is False.
        on_error: told "OPERATION: ExceptionName" of each failed call.
        """
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.on_error = on_error
        self._down_until = 0.0

    @property
    def available(self) -> bool:
        """False while a recent failure keeps Redis bypassed. Check it before creating the
        call's coroutine: one created and never awaited is a warning."""
        return time.monotonic() >= self._down_until

    async def call(self, operation: str, call: Awaitable[T]) -> tuple[bool, T | None]:
        """(True, the result), or (False, None) when the call failed or missed the deadline.

        Args:
            operation: what the call does, for `on_error`.
            call: the call's awaitable (a redis.asyncio command).

        Returns:
            Whether it answered, and its answer.
        """
        try:
            return True, await asyncio.wait_for(call, self.timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            self._down_until = time.monotonic() + self.retry_s
            self.on_error(f"{operation}: {type(exc).__name__}")
            return False, None
