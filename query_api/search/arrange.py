"""From a ranking to a page: the store pages a plain ranking itself; a fused one, or one
with near-duplicates collapsed, diversified or sorted by date, is arranged here from a pool
of the best candidates, and each result is told which near-duplicates it stands for.

Collapsing, diversity and the date order stay here rather than in the engine, which cannot give
the same pages: Qdrant Edge has no group-by query to collapse a group; Qdrant's MMR (Edge's and
the server's) takes a nearest-neighbour query's raw similarity as the relevance, where ours
scales the pool's scores to 0..1 and so diversifies any ranking (fused, BM25, a recommendation,
a collapsed pool) as the API documents; and ordering by created_at leaves out every photo
without a date, which ours puts last."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from core.vectorstore import Hit
from query_api.http.timing import Stages
from query_api.schemas.answers import Duplicates
from query_api.schemas.facets import FacetCounts
from query_api.schemas.search import MAX_DUPLICATE_IDS, MAX_LIMIT, MAX_OFFSET, Page
from query_api.search.facets import alongside, asked, count_facets, facet_fields
from query_api.search.ranking import collapse, diversify, group_of, newest_first
from query_api.search.reranking import Reranking
from query_api.services import StoreCalls

T = TypeVar("T")

# Collapsing this many candidates takes ~0.1 ms, sorting them by date ~0.5 ms: less on the
# event loop than a hop to a ranking thread and back under load. Diversity always hops.
INLINE_MAX = 500
# The most candidates a collapsed ranking reads to fill its deepest page: each doubling of
# the pool costs one more store query, and past this a page may be short of groups.
MAX_POOL = 4 * (MAX_OFFSET + MAX_LIMIT + 1)
# How many of a group's photos are read to count them: a group is a burst of one scene, tens
# of photos; one larger than this is counted as this many.
MAX_GROUP_READ = 1000


@dataclass(frozen=True)
class Ranking:
    """Candidates, best first, and whether the store may hold more past them."""

    hits: list[Hit]
    more: bool


@dataclass(frozen=True)
class Read:
    """One read of a ranking: its best `limit` from `offset` (with their vectors or not);
    `keep`, only the first that many of them (None: all). Only a fusion tells the two apart:
    it ranks by both rankings' best `limit` however few it keeps, so that a page needing a few
    results reads few hits yet ranks them as the whole pool would. `fields`: the payload
    fields its hits need (None: the whole payload; a facet count's pool reads only the fields
    it counts)."""

    limit: int
    offset: int = 0
    with_vectors: bool = False
    keep: int | None = None
    fields: Sequence[str] | None = None

    @property
    def kept(self) -> int:
        """How many hits the read hands over at most."""
        return self.limit if self.keep is None else self.keep


# A ranking of the live collection, blocking (run on the store's threads): one read of it.
Fetch = Callable[[Read], Ranking]


@dataclass(frozen=True)
class Candidates:
    """Where a page's candidates come from: the ranking `fetch` reads of `collection` through
    the store's `calls`, as a search of `kind` (the store metrics' label). `pooled`: the
    ranking cannot be paged by the store (a fusion of two); `exclude`: photo ids that are no
    result (the examples of a more-like-this) and no one's near-duplicate either."""

    calls: StoreCalls
    kind: str
    collection: str
    fetch: Fetch
    pooled: bool = False
    exclude: tuple[str, ...] = ()


# A collapsed page first reads this many times what it needs (each hit read costs ~13 us
# of CPU); twice that again whenever the photos read hold too few groups.
KEEP_FACTOR = 2


@dataclass(frozen=True)
class Arranged:
    """A page of results (one more than asked: it tells whether a next page exists) and the
    near-duplicates each stands for (photo id -> Duplicates); its facet counts if asked."""

    hits: list[Hit]
    duplicates: dict[str, Duplicates]
    facets: FacetCounts | None = None


async def arrange(
    candidates: Candidates, reranking: Reranking, page: Page, stages: Stages
) -> Arranged:
    """A page of the candidates' ranking. With facets asked, they are counted over the same
    ranking while the page is read (query_api/search/facets.py)."""
    arranging = _arranged(candidates, reranking, page, stages)
    if not asked(page):
        return await arranging

    counted = facet_fields(page)

    def read_pool(limit: int) -> list[Hit]:
        return candidates.fetch(Read(limit, keep=limit, fields=counted)).hits

    calls, collection = candidates.calls, candidates.collection
    counting = count_facets(calls, collection, page, stages, read_pool, pool=reranking.facet_pool)
    arranged, facets = await alongside(arranging, counting)
    return replace(arranged, facets=facets)


async def _arranged(
    candidates: Candidates, reranking: Reranking, page: Page, stages: Stages
) -> Arranged:
    calls, fetch, search = candidates.calls, candidates.fetch, f"search:{candidates.kind}"
    if not (candidates.pooled or page.rearranged() or reranking.boosts.active(page)):
        with stages.timed("search"):
            ranking = await calls.run(search, lambda: fetch(Read(page.limit + 1, page.offset)))
        return Arranged(ranking.hits, {})

    reranking.check(page)
    need = page.offset + page.limit + 1
    # Sorted by date: always the same pool, so its pages follow each other; past it, none.
    pool = reranking.candidates(page, pooled=True)
    vectors = page.diversity > 0
    # Diversity chooses among the whole pool and the date order sorts all of it; a page that
    # is only collapsed (or fused) needs its first `need` results, which the first few photos
    # of the ranking hold: collapsing keeps the ranking's order.
    keep = pool if vectors or page.sort == "newest" else min(pool, KEEP_FACTOR * need)
    while True:
        with stages.timed("search"):
            ranking = await calls.run(search, partial(fetch, Read(pool, 0, vectors, keep)))
        with stages.timed("rerank"):
            work = partial(_collapsed, ranking.hits, page)
            hits = await _off_the_loop(reranking, page, len(ranking.hits), work)
        if len(hits) >= need or not ranking.more or page.sort == "newest":
            break
        if keep < pool:  # too few groups among those read: more of the same ranking
            keep = min(keep * 2, pool)
            continue
        if pool >= MAX_POOL:
            break
        pool = min(pool * 2, MAX_POOL)  # a page of collapsed bursts: read deeper
        keep = pool
    with stages.timed("rerank"):
        # Diversity chooses among as many as the first read held, however deep collapse read.
        best = hits[: max(need, reranking.pool)]
        work = partial(_ordered, best, page, need)
        hits = await _off_the_loop(reranking, page, len(best), work)
    duplicates = await _duplicates(candidates, page, stages, hits[: page.limit])
    return Arranged(hits, duplicates)


async def _off_the_loop(reranking: Reranking, page: Page, size: int, work: Callable[[], T]) -> T:
    """Re-rank `size` candidates on the ranking threads, unless it takes microseconds."""
    if page.diversity > 0 or size > INLINE_MAX:
        return await reranking.run(work)
    return work()


def _collapsed(hits: list[Hit], page: Page) -> list[Hit]:
    return collapse(hits) if page.collapse else list(hits)


def _ordered(hits: list[Hit], page: Page, need: int) -> list[Hit]:
    """The page (and one more) of the pool: diversified, then sorted by date if asked."""
    if page.diversity > 0:
        hits = diversify(hits, page.diversity, need)
    if page.sort == "newest":
        hits = newest_first(hits)
    return hits[page.offset : need]


async def _duplicates(
    candidates: Candidates, page: Page, stages: Stages, hits: list[Hit]
) -> dict[str, Duplicates]:
    """For each result, the other photos of its group that match the search's filters."""
    if not page.collapse or not hits:
        return {}
    groups = sorted({group_of(h) for h in hits})

    def read() -> dict[str, Duplicates]:
        # On the store's thread with the read: a page of 100 results in groups of 1,000 is
        # 100,000 ids to sort out, a few milliseconds the event loop need not hold.
        members = candidates.calls.store.group_members(
            candidates.collection,
            groups,
            filter=page.to_store(candidates.exclude),
            limit_each=MAX_GROUP_READ,
        )
        found: dict[str, Duplicates] = {}
        for hit in hits:
            group = group_of(hit)
            others = [pid for pid in members.get(group, []) if pid != hit.photo_id]
            if others:
                found[hit.photo_id] = Duplicates(
                    group=group, count=len(others), ids=others[:MAX_DUPLICATE_IDS]
                )
        return found

    with stages.timed("search"):
        return await candidates.calls.run("duplicates", read)
