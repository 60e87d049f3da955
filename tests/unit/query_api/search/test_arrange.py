"""From a ranking to a page, on both engines: the store's own pages, near-duplicates
collapsed and named, diversity, and the pages of a fused ranking, which follow each other."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core.payload import PhotoPayload
from core.vectorstore import GROUP_FIELD, PhotoPoint, VectorStore, collection_name
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.schemas.search import Page, TextSearch
from query_api.search.arrange import Candidates, Fetch, Ranking, Read, arrange
from query_api.search.hybrid import HybridPlan
from query_api.search.pipeline import nearest_fetch
from query_api.search.reranking import Reranking
from query_api.services import StoreCalls
from tests.support.stores import ENGINES, engine_holding

DIM = 8
COLL = collection_name(1, "r")
POOL = 100
DEADLINE_S = 30.0  # bounds a hang only


def photos() -> list[PhotoPoint]:
    """60 photos; p00..p03 a burst of near-identical shots closest to the query."""
    rng = np.random.default_rng(4)
    query = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    points = []
    for i in range(60):
        near = query + rng.normal(0, 0.01, DIM) if i < 4 else rng.normal(size=DIM)
        vector = (near / np.linalg.norm(near)).astype(np.float32)
        title = "burst" if i < 4 else " ".join(rng.choice(["sea", "sky", "road", "tree"], 2))
        payload: PhotoPayload = {"title": title, GROUP_FIELD: "p00" if i < 4 else f"p{i:02d}"}
        points.append(PhotoPoint(f"p{i:02d}", vector, payload))
    return points


PHOTOS = photos()
QUERY = (np.ones(DIM) / np.sqrt(DIM)).astype(np.float32)


# The re-ranking threads every arrangement here shares; deadline bounds a hang only.
RERANK = Reranking(2, pool=POOL, diversity_window=40, timeout_s=DEADLINE_S, retry_after_s=1)


@pytest.fixture(scope="module", params=ENGINES)
def calls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreCalls]:
    folder = tmp_path_factory.mktemp("arrange")
    with (
        engine_holding(request.param, folder, COLL, DIM, PHOTOS) as store,
        ThreadPoolExecutor(2) as pool,
    ):
        yield StoreCalls(store, pool, timeout_s=DEADLINE_S, retry_after_s=1, metrics=Metrics())


def nearest(store: VectorStore) -> Fetch:
    return nearest_fetch(store, COLL, QUERY, Page(), ())


async def page_of(calls: StoreCalls, fetch: Fetch, pooled: bool = False, **options: Any) -> Any:
    page = Page(**options)
    candidates = Candidates(calls, "test", COLL, fetch, pooled=pooled)
    return await arrange(candidates, RERANK, page, Stages())


async def test_a_plain_ranking_is_paged_by_the_store(calls: StoreCalls) -> None:
    arranged = await page_of(calls, nearest(calls.store), limit=5, offset=2, collapse=False)
    every = [h.photo_id for h in calls.store.search(COLL, QUERY, limit=10)]
    assert [h.photo_id for h in arranged.hits] == every[2:8]  # one more: is there a next page
    assert arranged.duplicates == {}


async def test_a_burst_collapses_to_its_best_photo_which_names_the_others(
    calls: StoreCalls,
) -> None:
    arranged = await page_of(calls, nearest(calls.store), limit=3)
    best = arranged.hits[0].photo_id
    assert best in {"p00", "p01", "p02", "p03"}
    assert not {h.photo_id for h in arranged.hits[1:]} & {"p00", "p01", "p02", "p03"}
    named = arranged.duplicates[best]
    assert (named.group, named.count) == ("p00", 3)
    assert sorted(named.ids) == sorted({"p00", "p01", "p02", "p03"} - {best})


async def test_diversity_follows_the_most_relevant_by_an_unlike_photo(calls: StoreCalls) -> None:
    plain = await page_of(calls, nearest(calls.store), limit=3, collapse=False)
    assert {h.photo_id for h in plain.hits[:3]} <= {"p00", "p01", "p02", "p03"}
    diverse = await page_of(calls, nearest(calls.store), limit=3, collapse=False, diversity=0.7)
    assert diverse.hits[0].photo_id == plain.hits[0].photo_id
    assert diverse.hits[1].photo_id not in {"p00", "p01", "p02", "p03"}


async def test_a_collapsed_page_reads_a_few_of_the_fusion_and_is_the_whole_pools_page(
    calls: StoreCalls,
) -> None:
    read: list[int] = []

    def fetches(query: TextSearch) -> tuple[Fetch, Fetch]:
        fused = HybridPlan.of(calls.store, COLL, query, QUERY).fetch

        def kept(asked: Read) -> Ranking:
            ranking = fused(asked)
            read.append(len(ranking.hits))
            return ranking

        def whole(asked: Read) -> Ranking:
            # The whole pool, whatever is kept.
            return fused(replace(asked, keep=None))

        return kept, whole

    for offset in (0, 5, 30):
        query = TextSearch(q="sea sky", limit=5, offset=offset)  # collapsed, the default
        kept, whole = fetches(query)
        few = await arrange(Candidates(calls, "text", COLL, kept, True), RERANK, query, Stages())
        pool = await arrange(Candidates(calls, "text", COLL, whole, True), RERANK, query, Stages())
        assert [h.photo_id for h in few.hits] == [h.photo_id for h in pool.hits], offset
        assert few.duplicates == pool.duplicates
    assert read[0] < RERANK.pool  # the first page read 2 x 6 photos of the pool's 100


async def test_the_pages_of_a_fused_ranking_follow_each_other(calls: StoreCalls) -> None:
    def search(**options: Any) -> tuple[TextSearch, Fetch]:
        query = TextSearch(q="sea sky", collapse=False, **options)
        return query, HybridPlan.of(calls.store, COLL, query, QUERY).fetch

    pages: list[str] = []
    for offset in range(0, 40, 10):
        query, fetch = search(limit=10, offset=offset)
        candidates = Candidates(calls, "text", COLL, fetch, pooled=True)
        arranged = await arrange(candidates, RERANK, query, Stages())
        pages += [h.photo_id for h in arranged.hits[:10]]
    query, fetch = search(limit=40)
    candidates = Candidates(calls, "text", COLL, fetch, pooled=True)
    whole = await arrange(candidates, RERANK, query, Stages())
    assert pages == [h.photo_id for h in whole.hits[:40]]
    assert len(set(pages)) == 40
