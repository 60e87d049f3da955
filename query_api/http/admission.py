"""Admission control: a bound on the embeddings one replica has Triton compute at once.

Past its capacity a replica that queued every search would answer all of them late; this one
refuses the excess (503 with a short Retry-After) so that what it admits still meets its
deadline, and the load balancer or the caller retries elsewhere or later. A search waits a
few tens of milliseconds for a slot first: a burst of a fraction of a second (a cold cache's
first queries) is absorbed, a lasting overload is refused about as fast. Only searches that
need Triton take a slot: a cached query and "more like this" never wait for one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from query_api.http.errors import ApiError
from query_api.http.timing import Stages


class Admission:
    """At most `limit` embeddings in flight; past it, `slot` waits up to `wait_s`, then 503."""

    def __init__(
        self,
        limit: int,
        wait_s: float,
        retry_after_s: int,
        on_refuse: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self.on_refuse = on_refuse
        # Created on first use, inside the event loop that serves the requests.
        self._slots: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def slot(self, kind: str, stages: Stages) -> AsyncIterator[None]:
        """Hold one of the slots while embedding (`kind`: text or image, for the metrics);
        the wait for it is the request's `admit` stage."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        try:
            with stages.timed("admit"):
                await asyncio.wait_for(self._slots.acquire(), self.wait_s)
        except TimeoutError:
            self.on_refuse(kind)
            raise ApiError(
                503,
                f"this replica is embedding {self.limit} queries already (its capacity): "
                f"try again in {self.retry_after_s} s",
                code="overloaded",
                headers={"Retry-After": str(self.retry_after_s)},
            ) from None
        try:
            yield
        finally:
            self._slots.release()
