"""Facet counts beside a search's results: the values of the asked fields among the photos
that pass its score threshold, or among its ranked candidate pool, counted exactly by the
store's facet API over the search's filter and those photos' ids."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from core.vectorstore import Hit
from query_api.schemas import Page
from query_api.schemas_facets import FacetCounts, FacetName, FacetValue
from query_api.services import StoreCalls
from query_api.timing import Stages

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
# blocking: run on the store's threads.
ReadPool = Callable[[int], list[Hit]]


def asked(page: Page) -> bool:
    """Whether a search of this page counts facets: they were asked for, on the first page.
    A later page has the first page's counts already (the same photos match): it skips them."""
    return bool(page.facets) and page.offset == 0


async def count_facets(
    calls: StoreCalls,
    collection: str,
    page: Page,
    stages: Stages,
    read_pool: ReadPool,
    *,
    pool: int,
    exclude: tuple[str, ...] = (),
) -> FacetCounts | None:
    """The page's facets (None: not asked, or not its first page). The photos counted: with a
    score_threshold, those above it, at most `pool` of them (the best); without one, the first
    `pool` of the ranking, as the pages draw from it (not collapsed). Each field is then one
    exact facet call of the store with the search's filter and those photos' ids, all at
    once on the store's threads (a Qdrant server answers them side by side; the embedded
    stores take them in turn)."""
    if not asked(page):
        return None
    store = calls.store
    with stages.timed("facets"):
        hits = await calls.run("facets", partial(read_pool, pool))
        photo_ids = list(dict.fromkeys(hit.photo_id for hit in hits))
        where = page.to_store(exclude)

        async def count(name: FacetName) -> list[tuple[str, int]]:
            if not photo_ids:  # nothing matches: no value to count
                return []
            work = partial(
                store.facet_counts,
                collection,
                FIELDS[name],
                filter=where,
                photo_ids=photo_ids,
                limit=page.facet_limit,
            )
            return await calls.run("facets", work)

        found = await asyncio.gather(*(count(name) for name in page.facets))
    return FacetCounts(
        over="pool" if page.score_threshold is None else "score_threshold",
        photos=len(photo_ids),
        capped=len(hits) >= pool,
        fields={
            name: [FacetValue(value=value, count=n) for value, n in counts]
            for name, counts in zip(page.facets, found, strict=True)
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
