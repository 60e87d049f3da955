"""Where a search's time goes: its stages, sent as `Server-Timing` and kept as histograms.

The metrics middleware puts a `Stages` on every request's state; the search path times its
stages into it (`with stages.timed("embed"): ...`); when the answer starts, the middleware
adds `total` (the app's whole time for the request) and `other` (total less the named stages:
routing, validation, serialization, the event loop's own waits) to the header and histograms.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

# The stages a search can have, in the order it meets them.
STAGES = (
    "resolve",
    "cache",
    "admit",
    "tokenize",
    "fetch",
    "decode",
    "retrieve",
    "embed",
    "search",
    "facets",
    "rerank",
)
# What each stage is, for the header's `desc` (browsers' developer tools show it).
# No commas in them: many parsers split the header at every comma, quotes or not.
_DESCRIPTIONS = {
    "resolve": "live collection",
    "cache": "query cache (Redis)",
    "admit": "waiting for an embedding slot",
    "tokenize": "tokenizer",
    "fetch": "image fetched from its URL",
    "decode": "image decode",
    "retrieve": "stored vector",
    "embed": "Triton: queue + batch + compute",
    "search": "vector and keyword search",
    "facets": "facet counts: candidates + counts (beside the search)",
    "rerank": "fusion + collapse + diversity + sort",
    "other": "routing + validation + serialization",
    "total": "the API's whole time",
}


@dataclass
class Stages:
    """The timed stages of one request, in seconds, in the order they were first timed."""

    start: float = field(default_factory=time.perf_counter)
    spent: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.spent[name] = self.spent.get(name, 0.0) + seconds

    def overlapped(self, concurrent: Sequence[Stages]) -> None:
        """Add the stages of work that ran side by side (a query and its `not` descriptions,
        embedded at once): each stage's longest, the part of it the request waited for, so the
        stages still add up to no more than the request's time."""
        for name in dict.fromkeys(n for stages in concurrent for n in stages.spent):
            self.add(name, max(stages.spent.get(name, 0.0) for stages in concurrent))

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - began)

    def finished(self, now: float | None = None) -> dict[str, float]:
        """The stages with `other` and `total` added, as of `now`; empty if none was timed."""
        if not self.spent:
            return {}
        total = (time.perf_counter() if now is None else now) - self.start
        other = max(0.0, total - sum(self.spent.values()))
        return {**self.spent, "other": other, "total": total}


def server_timing(stages: dict[str, float]) -> str:
    """The `Server-Timing` header's value (W3C Server Timing): milliseconds per stage."""
    return ", ".join(
        f'{name};dur={seconds * 1000:.2f};desc="{_DESCRIPTIONS.get(name, name)}"'
        for name, seconds in stages.items()
    )
