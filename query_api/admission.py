"""Admission control: a bound on the embeddings one replica has Triton compute at once.

Past its capacity a replica that queued every search would answer all of them late; this one
refuses the excess at once (503 with a short Retry-After) so that what it admits still meets
its deadline, and the load balancer or the caller retries elsewhere or later. Only searches
that need Triton take a slot: a cached query and "more like this" never wait for one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from query_api.errors import ApiError


class Admission:
    """At most `limit` embeddings in flight; past it, `slot` raises 503 without waiting."""

    def __init__(
        self, limit: int, retry_after_s: int, on_refuse: Callable[[str], None] = lambda _: None
    ) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.on_refuse = on_refuse
        self.busy = 0

    @contextmanager
    def slot(self, kind: str) -> Iterator[None]:
        """Hold one of the slots while embedding (`kind`: text or image, for the metrics)."""
        if self.busy >= self.limit:
            self.on_refuse(kind)
            raise ApiError(
                503,
                f"this replica is embedding {self.limit} queries already (its capacity): "
                f"try again in {self.retry_after_s} s",
                code="overloaded",
                headers={"Retry-After": str(self.retry_after_s)},
            )
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
