"""Facet counts beside a search's results: the values of the asked fields among the photos
that pass its score threshold, or among its ranked candidate pool, counted exactly from the
payloads of those photos as the store returns them."""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from core.vectorstore import Hit
from query_api.http.timing import Stages
from query_api.schemas.facets import FacetCounts, FacetName, FacetValue
from query_api.schemas.search import Page
from query_api.services import StoreCalls

T = TypeVar("T")

# The payload field each facet counts (the indexer writes a photo's palette colours as
# `colors`, a list like `tags`).
FIELDS: dict[FacetName, str] = {
    "tags": "tags",
    "auto_tags": "auto_tags",
    "color": "colors",
    "orientation": "orientation",
    "license": "license",
    "photographer": "photographer",
}

# Reads the first `limit` photos of the search's ranking (with its filter and threshold),
# with their payloads, blocking: run on the store's threads.
ReadPool = Callable[[int], list[Hit]]


def facet_fields(page: Page) -> tuple[str, ...]:
    """The payload fields the page's facets count: all a pool's hits need carry."""
    return tuple(FIELDS[name] for name in page.facets)


def asked(page: Page) -> bool:
    """Whether a search of this page counts facets: they were asked for, on the first page.
    A later page has the first page's counts already (the same photos match): it skips them."""
    return bool(page.facets) and page.offset == 0


def facet_reads(page: Page, pool: int) -> int:
    """The candidates a search of this page reads to count its facets: priced as candidates
    re-ranked are (query_api.http.ratelimit.price)."""
    return pool if asked(page) else 0


def _held(value: object) -> Iterable[object]:
    """The values a photo holds, each once: a list field's distinct items, or the one value."""
    if value is None:
        return ()
    if isinstance(value, list):
        return set(value) if len(value) > 1 else value
    return (value,)


def count_values(
    hits: Sequence[Hit], names: Sequence[FacetName], limit: int
) -> dict[FacetName, list[tuple[str, int]]]:
    """Each facet's `limit` values held by the most of these photos, with how many hold each:
    most first, equal counts by value (the order of the store's facet API)."""
    counted: dict[FacetName, list[tuple[str, int]]] = {}
    for name in names:
        field = FIELDS[name]
        held = Counter(str(v) for hit in hits for v in _held(hit.payload.get(field)))
        counted[name] = heapq.nsmallest(limit, held.items(), key=lambda vc: (-vc[1], vc[0]))
    return counted


async def count_facets(
    calls: StoreCalls,
    collection: str,
    page: Page,
    stages: Stages,
    read_pool: ReadPool,
    *,
    pool: int,
) -> FacetCounts | None:
    """The page's facets (None: not asked, or not its first page). The photos counted: with a
    score_threshold, those above it, at most `pool` of them (the best); without one, the first
    `pool` of the ranking, as the pages draw from it (not collapsed). Their payloads come with
    the ranking, so each value is counted from them, on the store's thread that read them.

    The store's facet API (Qdrant's, VectorStore.facet_counts) counts the same given the
    search's filter and the photos' ids, but its cost grows with the ids times the field's
    values: on Qdrant Edge, ~0.6 s for the tags (500 values) of a pool of 1,000 among 50,000
    photos, with the GIL held. Counting the payloads the ranking read anyway takes ~0.4 ms a
    field."""
    if not asked(page):
        return None

    def read_and_count() -> tuple[int, bool, dict[FacetName, list[tuple[str, int]]]]:
        hits = read_pool(pool)
        photos = list({hit.photo_id: hit for hit in hits}.values())
        return len(photos), len(hits) >= pool, count_values(photos, page.facets, page.facet_limit)

    with stages.timed("facets"):
        photos, capped, counted = await calls.run("facets", read_and_count)
    return FacetCounts(
        over="pool" if page.score_threshold is None else "score_threshold",
        photos=photos,
        capped=capped,
        fields={
            name: [FacetValue(value=value, count=n) for value, n in values]
            for name, values in counted.items()
        },
    )


async def alongside(
    main: Awaitable[T], counting: Coroutine[Any, Any, FacetCounts | None]
) -> tuple[T, FacetCounts | None]:
    """A search's page and its facets, read at once (each is its own store reads); when the
    page fails, the counting is dropped and the page's error raised as it is."""
    task = asyncio.ensure_future(counting)
    try:
        result = await main
    except BaseException:
        task.cancel()
        raise
    return result, await task
