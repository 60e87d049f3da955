"""Facet counts beside a search, on both engines: over the ranking's pool or over every photo
above a score threshold, each count equal to one recomputed from the stored payloads."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from core.payload import PhotoPayload
from core.vectorstore import Hit, PhotoPoint, SearchFilter, VectorStore, collection_name
from query_api.http.errors import ApiError
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.schemas.facets import FacetCounts, FacetName
from query_api.schemas.search import Page, TextSearch
from query_api.search.arrange import Candidates, Fetch, Ranking, Read, arrange
from query_api.search.facets import (
    FIELDS,
    alongside,
    asked,
    count_facets,
    count_values,
    facet_reads,
)
from query_api.search.hybrid import HybridPlan
from query_api.search.pipeline import nearest_fetch
from query_api.search.reranking import Reranking
from query_api.services import StoreCalls
from tests.support.stores import ENGINES, engine_holding

DIM = 8
COLL = collection_name(1, "f")
POOL = 20  # of 60 photos: a pool that leaves photos out
DEADLINE_S = 30.0  # bounds a hang only
TAGS = ("sea", "sky", "road", "tree", "city")
LICENSES = ("cc-by", "royalty-free", "editorial")
PHOTOGRAPHERS = ("ana", "ben", "chen", "dee")


def photos() -> list[PhotoPoint]:
    rng = np.random.default_rng(7)
    points = []
    for i in range(60):
        vector = rng.normal(size=DIM)
        payload: PhotoPayload = {
            "title": " ".join(rng.choice(TAGS, 2)),
            # One to three tags: a list field counts a photo once per value.
            "tags": sorted({str(t) for t in rng.choice(TAGS, 1 + i % 3)}),
            "license": LICENSES[i % 3],
        }
        if i % 5:  # some photos without a photographer: they count under none
            payload["photographer"] = PHOTOGRAPHERS[(i * 7) % 4]
        unit = (vector / np.linalg.norm(vector)).astype(np.float32)
        points.append(PhotoPoint(f"p{i:02d}", unit, payload))
    return points


PHOTOS = photos()
QUERY = (np.ones(DIM) / np.sqrt(DIM)).astype(np.float32)
RERANK = Reranking(
    2, pool=10, diversity_window=40, timeout_s=DEADLINE_S, retry_after_s=1, facet_pool=POOL
)


@pytest.fixture(scope="module", params=ENGINES)
def calls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreCalls]:
    folder = tmp_path_factory.mktemp("facets")
    with (
        engine_holding(request.param, folder, COLL, DIM, PHOTOS) as store,
        ThreadPoolExecutor(4) as pool,
    ):
        yield StoreCalls(store, pool, timeout_s=DEADLINE_S, retry_after_s=1, metrics=Metrics())


def nearest(store: VectorStore, page: Page) -> Fetch:
    return nearest_fetch(store, COLL, QUERY, page, ())


def recounted(
    store: VectorStore, photo_ids: Sequence[str], names: Sequence[FacetName], limit: int
) -> dict[str, list[tuple[str, int]]]:
    """Each facet's counts over these photos, from their payloads as stored: most first, equal
    counts by value."""
    stored = store.retrieve(COLL, list(photo_ids))
    assert len(stored) == len(set(photo_ids))
    counted: dict[str, list[tuple[str, int]]] = {}
    for name in names:
        held: Counter[str] = Counter()
        for photo in stored:
            value = photo.payload.get(FIELDS[name])
            values = value if isinstance(value, list) else [] if value is None else [value]
            held.update({str(v) for v in values})
        counted[name] = sorted(held.items(), key=lambda vc: (-vc[1], vc[0]))[:limit]
    return counted


def answered(facets: FacetCounts | None) -> dict[str, list[tuple[str, int]]]:
    assert facets is not None
    return {name: [(v.value, v.count) for v in vs] for name, vs in facets.fields.items()}


async def counts(calls: StoreCalls, page: Page, fetch: Fetch, pool: int = POOL) -> Any:
    def read_pool(limit: int) -> Any:
        return fetch(Read(limit, keep=limit)).hits

    return await count_facets(calls, COLL, page, Stages(), read_pool, pool=pool)


def test_a_list_field_counts_each_photo_once_per_value_most_first() -> None:
    hits = [
        Hit("a", 0.9, {"tags": ["sea", "sky", "sea"], "license": "cc-by"}),
        Hit("b", 0.8, {"tags": ["sky"], "license": "editorial", "colors": ["red"]}),
        Hit("c", 0.7, {"tags": [], "license": "cc-by", "orientation": "square"}),
        Hit("d", 0.6, {"tags": ["tree"]}),
    ]
    counted = count_values(hits, ["tags", "license", "color", "orientation"], 2)
    assert counted == {
        "tags": [("sky", 2), ("sea", 1)],  # "sea" ties "tree": by value
        "license": [("cc-by", 2), ("editorial", 1)],
        "color": [("red", 1)],
        "orientation": [("square", 1)],
    }


def test_facets_are_counted_when_asked_on_the_first_page_only() -> None:
    assert asked(Page(facets=["tags"]))
    assert not asked(Page())
    assert not asked(Page(facets=["tags"], offset=20))


def test_the_pool_read_for_facets_is_priced_as_candidates() -> None:
    assert facet_reads(Page(facets=["tags", "color"]), 1000) == 1000
    assert facet_reads(Page(facets=["tags"], offset=20), 1000) == 0
    assert facet_reads(Page(), 1000) == 0


async def test_without_a_threshold_the_ranking_s_pool_is_counted(calls: StoreCalls) -> None:
    page = Page(facets=["tags", "license", "photographer"], facet_limit=10)
    facets = await counts(calls, page, nearest(calls.store, page))
    pool = [h.photo_id for h in calls.store.search(COLL, QUERY, limit=POOL)]
    assert facets is not None
    assert (facets.over, facets.photos, facets.capped) == ("pool", POOL, True)
    assert answered(facets) == recounted(calls.store, pool, page.facets, 10)
    assert sum(n for _, n in answered(facets)["license"]) == POOL


async def test_the_search_s_filter_narrows_the_pool_and_its_counts(calls: StoreCalls) -> None:
    page = Page(facets=["tags", "photographer", "license"], license="cc-by", tags_any=["sea"])
    facets = await counts(calls, page, nearest(calls.store, page))
    matching = calls.store.search(COLL, QUERY, limit=POOL, filter=page.to_store())
    assert facets is not None and facets.photos == len(matching) < POOL
    assert not facets.capped
    assert answered(facets) == recounted(
        calls.store, [h.photo_id for h in matching], page.facets, page.facet_limit
    )
    assert answered(facets)["license"] == [("cc-by", len(matching))]
    assert ("sea", len(matching)) in answered(facets)["tags"]


async def test_with_a_threshold_every_photo_above_it_is_counted(calls: StoreCalls) -> None:
    scores = {p.photo_id: float(np.dot(p.vector, QUERY)) for p in PHOTOS}
    ranked = sorted(scores.values(), reverse=True)
    # Between the 30th and 31st scores: more photos pass than the pool would hold.
    threshold = (ranked[29] + ranked[30]) / 2
    above = [pid for pid, s in scores.items() if s >= threshold]
    page = Page(facets=["tags", "license"], score_threshold=threshold, facet_limit=3)
    facets = await counts(calls, page, nearest(calls.store, page), pool=100)
    assert facets is not None
    assert (facets.over, facets.photos, facets.capped) == ("score_threshold", 30, False)
    assert answered(facets) == recounted(calls.store, above, page.facets, 3)
    assert len(answered(facets)["tags"]) == 3  # facet_limit: the three most held


async def test_a_threshold_set_larger_than_the_pool_is_capped(calls: StoreCalls) -> None:
    page = Page(facets=["license"], score_threshold=-1.0)
    facets = await counts(calls, page, nearest(calls.store, page))
    assert facets is not None and (facets.photos, facets.capped) == (POOL, True)
    assert sum(n for _, n in answered(facets)["license"]) == POOL


async def test_a_fused_ranking_s_pool_is_the_fusion_s_first_photos(calls: StoreCalls) -> None:
    query = TextSearch(q="sea sky", facets=["tags", "photographer"], collapse=False)
    fetch = HybridPlan.of(calls.store, COLL, query, QUERY).fetch
    facets = await counts(calls, query, fetch)
    fused = [h.photo_id for h in fetch(Read(POOL, keep=POOL)).hits]
    assert facets is not None and facets.photos == len(fused) == POOL
    assert answered(facets) == recounted(calls.store, fused, query.facets, query.facet_limit)


async def test_nothing_matching_counts_no_value(calls: StoreCalls) -> None:
    page = Page(facets=["tags", "license"], photographer="nobody")
    facets = await counts(calls, page, nearest(calls.store, page))
    assert facets == FacetCounts(
        over="pool", photos=0, capped=False, fields={"tags": [], "license": []}
    )


async def test_arrange_answers_the_first_page_s_facets_beside_its_results(
    calls: StoreCalls,
) -> None:
    first = Page(facets=["license"], limit=5)
    candidates = Candidates(calls, "test", COLL, nearest(calls.store, first))
    arranged = await arrange(candidates, RERANK, first, Stages())
    pool = [h.photo_id for h in calls.store.search(COLL, QUERY, limit=POOL)]
    assert len(arranged.hits) == 6
    assert answered(arranged.facets) == recounted(calls.store, pool, ["license"], 10)
    later = Page(facets=["license"], limit=5, offset=5)
    candidates = Candidates(calls, "test", COLL, nearest(calls.store, later))
    arranged = await arrange(candidates, RERANK, later, Stages())
    assert arranged.facets is None and len(arranged.hits) == 6


async def test_the_pool_is_read_with_only_the_counted_fields(calls: StoreCalls) -> None:
    """Each hit costs CPU to hand over, the more the more payload it carries: the pool for
    the counts reads the counted fields alone, the page its whole payloads."""
    page = Page(facets=["license", "color"], limit=5)
    read: list[tuple[int, set[str]]] = []
    plain = nearest(calls.store, page)

    def fetch(asked: Read) -> Ranking:
        ranking = plain(asked)
        read.append((asked.limit, {key for hit in ranking.hits for key in hit.payload}))
        return ranking

    arranged = await arrange(Candidates(calls, "test", COLL, fetch), RERANK, page, Stages())
    assert arranged.facets is not None and arranged.facets.photos == POOL
    [pool_keys] = [keys for limit, keys in read if limit == POOL]
    assert pool_keys <= {"photo_id", "license", "colors"} and "license" in pool_keys
    [page_keys] = [keys for limit, keys in read if limit != POOL]
    assert {"license", "tags"} <= page_keys


async def test_the_facet_stage_is_timed(calls: StoreCalls) -> None:
    page = Page(facets=["tags"])
    stages = Stages()
    await count_facets(
        calls,
        COLL,
        page,
        stages,
        lambda limit: nearest(calls.store, page)(Read(limit)).hits,
        pool=POOL,
    )
    assert list(stages.spent) == ["facets"]


async def test_a_failed_page_drops_its_counting_and_raises_its_own_error() -> None:
    started, dropped, never = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def counting() -> FacetCounts | None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            dropped.set()
            raise
        return None

    async def page() -> int:
        await started.wait()
        raise ApiError(422, "bad page")

    with pytest.raises(ApiError, match="bad page"):
        await alongside(page(), counting())
    await asyncio.wait_for(dropped.wait(), DEADLINE_S)


async def test_the_page_and_its_counts_are_both_answered() -> None:
    facets = FacetCounts(over="pool", photos=0, capped=False, fields={})

    async def counting() -> FacetCounts | None:
        return facets

    async def page() -> str:
        return "page"

    assert await alongside(page(), counting()) == ("page", facets)


async def test_the_counts_are_those_of_the_store_s_facet_api(calls: StoreCalls) -> None:
    page = Page(facets=["tags", "license", "photographer"], license="editorial")
    facets = await counts(calls, page, nearest(calls.store, page))
    pool = [h.photo_id for h in calls.store.search(COLL, QUERY, limit=POOL, filter=page.to_store())]
    by_the_store = {
        name: calls.store.facet_counts(
            COLL, FIELDS[name], filter=page.to_store(), photo_ids=pool, limit=page.facet_limit
        )
        for name in page.facets
    }
    assert answered(facets) == by_the_store


def test_the_store_counts_the_photos_of_a_filter_among_ids(calls: StoreCalls) -> None:
    store = calls.store
    some = [p.photo_id for p in PHOTOS[:25]]
    by_ids = store.facet_counts(COLL, "license", photo_ids=some, limit=10)
    assert by_ids == recounted(store, some, ["license"], 10)["license"]
    filtered = store.facet_counts(
        COLL, "tags", filter=SearchFilter(license="editorial"), photo_ids=some, limit=10
    )
    editorial = [p.photo_id for p in PHOTOS[:25] if p.payload["license"] == "editorial"]
    assert filtered == recounted(store, editorial, ["tags"], 10)["tags"]
    assert store.facet_counts(COLL, "tags", photo_ids=[], limit=10) == []
