"""Business boosts through the search path (query_api/search/boosts.py): the page's weights over the
replica's, the formula's order on both stores for every kind of search, and no change at all
with both weights 0."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from core.embedding.arrays import Embeddings
from core.payload import PhotoPayload
from core.settings_api import ApiSettings
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore
from core.vectorstore.boosts import boosted_score
from core.vectorstore.engine import Boosted
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.routes import search as search_routes
from query_api.schemas.answers import SearchResponse
from query_api.schemas.search import Page, RecommendSearch, TextSearch
from query_api.search.boosts import Boosts, rescored
from query_api.search.embed import QueryEmbedder
from query_api.search.kinds import RecommendKind, SimilarKind, TextKind
from query_api.search.pipeline import SearchParts, search
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection, StoreCalls
from tests.support.stores import ENGINES, engine_store
from tests.unit.query_api.conftest import DEADLINE_S, DIM, LIVE, QUERIES, api_settings, router_app

NOW = datetime(2026, 6, 1, tzinfo=UTC)
N = 30


def photo(i: int, vector: Embeddings) -> PhotoPoint:
    """Photos near "a cat", whose titles hold "cat" each as often and as long as no other's
    (no two score alike by words); dates 9 days apart (none for some), a popularity for most."""
    title = " ".join(["cat"] * (1 + i % 5) + ["x"] * (i // 5))
    payload: PhotoPayload = {"title": title, "tags": []}
    payload["created_at"] = None if i % 4 == 0 else (NOW - timedelta(days=9 * i)).isoformat()
    if i % 3:
        payload["popularity"] = float((i * 7) % 23)
    return PhotoPoint(f"p{i:02d}", vector, payload)


def photos() -> list[PhotoPoint]:
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32) * 0.4 + QUERIES["a cat"]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [photo(i, v) for i, v in enumerate(vectors)]


@pytest.fixture(params=ENGINES)
def boost_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    store = engine_store(request.param, tmp_path, (LIVE,), DIM)
    store.ensure_indexes(LIVE)
    store.upsert(LIVE, photos())
    store.set_aliases({LIVE_ALIAS: LIVE})
    yield store
    store.close()


@pytest.fixture
def boost_calls(boost_store: VectorStore) -> Iterator[StoreCalls]:
    with ThreadPoolExecutor(2, thread_name_prefix="store") as pool:
        yield StoreCalls(
            boost_store, pool, timeout_s=DEADLINE_S, retry_after_s=7, metrics=Metrics()
        )


@pytest.fixture
def pinned() -> Iterator[Reranking]:
    """Re-ranking from a pool of 50 (every photo) with boosts at a pinned time."""
    rerank = Reranking(1, pool=50, diversity_window=1000, timeout_s=DEADLINE_S, retry_after_s=7)
    rerank.boosts = Boosts(recency_half_life_days=30.0, popularity_half=5.0, now=lambda: NOW)
    try:
        yield rerank
    finally:
        rerank.close()


def formula(recency: float, popularity: float) -> Boosted:
    return Boosted(recency, 30 * 86400.0, NOW, popularity, 5.0)


def expected(
    plain: SearchResponse, boost: Boosted, payloads: dict[str, PhotoPayload]
) -> list[tuple[str, float]]:
    scored = [(r.id, boosted_score(r.score, payloads[r.id], boost)) for r in plain.results]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


def ranked(answer: SearchResponse) -> list[tuple[str, float]]:
    return [(r.id, r.score) for r in answer.results]


def assert_same(answer: SearchResponse, wanted: list[tuple[str, float]]) -> None:
    assert [pid for pid, _ in ranked(answer)] == [pid for pid, _ in wanted]
    assert [s for _, s in ranked(answer)] == pytest.approx([s for _, s in wanted], rel=1e-5)


PAYLOADS = {p.photo_id: p.payload for p in photos()}


async def text(
    query: TextSearch,
    queries: QueryEmbedder,
    calls: StoreCalls,
    reranking: Reranking,
) -> SearchResponse:
    live = LiveCollection(calls, alias_cache_s=5.0)
    return await search(TextKind(query, queries), SearchParts(calls, live, reranking, "", Stages()))


def test_the_pages_weights_replace_the_replicas_and_zero_is_no_formula() -> None:
    boosts = Boosts(recency=0.5, popularity=0.0, now=lambda: NOW)
    assert boosts.weights(Page()) == (0.5, 0.0)
    assert boosts.weights(Page(boost_recency=0.0, boost_popularity=2.0)) == (0.0, 2.0)
    assert boosts.of_page(Page(boost_recency=0)) is None
    assert not boosts.active(Page(boost_recency=0))
    made = boosts.of_page(Page())
    assert made == Boosted(0.5, 365 * 86400.0, NOW, 0.0, 10.0)
    settings = ApiSettings(boost_popularity=1.5, popularity_half=4.0)
    replica = Boosts.of(settings)
    replica.now = lambda: NOW
    assert replica.of_page(Page()) == Boosted(0.0, 365 * 86400.0, NOW, 1.5, 4.0)


def test_rescored_sorts_by_the_formula_and_leaves_an_unboosted_ranking() -> None:
    from core.vectorstore import Hit

    hits = [Hit("a", 0.5, {}), Hit("b", 0.4, {"popularity": 5.0})]
    assert rescored(hits, None) is hits
    again = rescored(hits, formula(0.0, 1.0))
    assert [(h.photo_id, h.score) for h in again] == [("b", 0.9), ("a", 0.5)]


@pytest.mark.parametrize(
    "mode, threshold", [("vector", None), ("hybrid", None), ("keyword", None), ("hybrid", 0.1)]
)
async def test_a_boosted_text_search_ranks_by_the_formula_on_both_stores(
    queries: QueryEmbedder,
    boost_calls: StoreCalls,
    pinned: Reranking,
    mode: str,
    threshold: float | None,
) -> None:
    query = {"q": "a cat", "mode": mode, "collapse": False, "score_threshold": threshold}
    plain = await text(TextSearch(**query, limit=N), queries, boost_calls, pinned)
    assert len(plain.results) > 10
    boost = formula(0.02, 0.03) if mode == "hybrid" else formula(0.4, 0.5)
    weights = {"boost_recency": boost.recency_weight, "boost_popularity": boost.popularity_weight}
    boosted = await text(TextSearch(**query, limit=8, **weights), queries, boost_calls, pinned)
    wanted = expected(plain, boost, PAYLOADS)
    assert_same(boosted, wanted[:8])
    assert [pid for pid, _ in wanted[:8]] != [r.id for r in plain.results[:8]]  # it moved
    # The next page follows on from the same pool.
    second = await text(
        TextSearch(**query, limit=8, offset=8, **weights), queries, boost_calls, pinned
    )
    assert_same(second, wanted[8:16])


async def test_with_both_weights_zero_the_search_is_as_without_boosts(
    queries: QueryEmbedder, boost_calls: StoreCalls, pinned: Reranking
) -> None:
    for mode in ("vector", "hybrid"):
        absent = TextSearch(q="a cat", mode=mode, limit=10)
        zero = TextSearch(q="a cat", mode=mode, limit=10, boost_recency=0, boost_popularity=0)
        before = await text(absent, queries, boost_calls, pinned)
        after = await text(zero, queries, boost_calls, pinned)
        assert ranked(before) == ranked(after)
    # The replica's default weights apply unless a search sets its own 0.
    pinned.boosts = Boosts(recency=0.4, now=lambda: NOW)
    plain = {"q": "a cat", "mode": "vector", "limit": 10, "collapse": False}
    assert pinned.candidates(TextSearch(**plain), pooled=False) == 50
    own = TextSearch(**plain, boost_recency=0)
    assert pinned.candidates(own, pooled=False) == 0
    defaulted = await text(
        TextSearch(q="a cat", mode="vector", limit=10), queries, boost_calls, pinned
    )
    assert ranked(defaulted) != ranked(await text(own, queries, boost_calls, pinned))


async def test_boosted_more_like_this_and_recommendations(
    boost_calls: StoreCalls, pinned: Reranking
) -> None:
    live = LiveCollection(boost_calls, alias_cache_s=5.0)
    weights = {"boost_recency": 0.4, "boost_popularity": 0.5}
    wanted = formula(0.4, 0.5)

    async def similar(page: Page) -> SearchResponse:
        parts = SearchParts(boost_calls, live, pinned, "", Stages())
        return await search(SimilarKind(page, "p05"), parts)

    async def recommend(query: RecommendSearch) -> SearchResponse:
        parts = SearchParts(boost_calls, live, pinned, "", Stages())
        return await search(RecommendKind(query), parts)

    plain = await similar(Page(limit=N, collapse=False))
    boosted = await similar(Page(limit=6, collapse=False, **weights))
    assert_same(boosted, expected(plain, wanted, PAYLOADS)[:6])
    ask = {"positive": ["p03"], "negative": ["p04"], "collapse": False}
    plain = await recommend(RecommendSearch(**ask, limit=N))
    boosted = await recommend(RecommendSearch(**ask, limit=6, **weights))
    assert_same(boosted, expected(plain, wanted, PAYLOADS)[:6])


def test_the_api_takes_the_boosts_and_documents_them(
    boost_store: VectorStore, tmp_path: Path
) -> None:
    settings = api_settings(tmp_path)
    settings.api.popularity_half = 5.0
    settings.api.recency_half_life_days = 30.0
    app = router_app(settings, boost_store, search_routes.router)
    with TestClient(app) as client:
        app.state.services.reranking.boosts.now = lambda: NOW
        ask = "/v1/search/recommend?positive=p03&collapse=false"
        plain = SearchResponse.model_validate(client.get(f"{ask}&limit={N}").json())
        answer = client.get(f"{ask}&limit=6&boost_recency=0.4&boost_popularity=0.5")
        assert answer.status_code == 200, answer.text
        boosted = SearchResponse.model_validate(answer.json())
        assert_same(boosted, expected(plain, formula(0.4, 0.5), PAYLOADS)[:6])
        refused = client.get(f"{ask}&boost_popularity=11")
        assert refused.status_code == 422
    params = app.openapi()["paths"]["/v1/search"]["get"]["parameters"]
    described = {p["name"]: p.get("description", "") for p in params}
    assert "recency" in described["boost_recency"]
    assert "popularity" in described["boost_popularity"]
