"""Hybrid, keyword and negative text search, near-duplicates collapsed, more like these and not
like those, diversity and newest first: against real Triton, real Redis and Qdrant Edge."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from core.payload import PhotoPayload
from core.settings import Settings
from core.vectorstore import GROUP_FIELD, PhotoPoint, VectorStore
from model.triton_server import TritonServer
from query_api.search.ranking import RRF_K
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    Indexed,
    api_settings,
    embed_texts,
    index_photos,
    own_store,
    serving,
)

SEARCH = {"X-API-Key": SEARCH_KEY}
ADMIN = {"X-API-Key": ADMIN_KEY}
QUERY = "a lighthouse on a cliff at dusk"
# A word no other photo holds, written with an accent and capitals.
RARE = "Zéphyrine"
# One burst of near-identical shots near QUERY's embedding, one of them with another license.
BURST = ["burst/1.jpg", "burst/2.jpg", "burst/3.jpg", "burst/4.jpg"]


@dataclass
class Api:
    url: str
    settings: Settings
    store: VectorStore
    indexed: Indexed
    vectors: dict[str, Any]
    payloads: dict[str, PhotoPayload]

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=SEARCH if headers is None else headers, **kw)

    def search(self, q: str, **params: Any) -> dict[str, Any]:
        response = self.get("/v1/search", params={"q": q, **params})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def ids(self, q: str, **params: Any) -> list[str]:
        return [r["id"] for r in self.search(q, **params)["results"]]

    def embed(self, *texts: str) -> Any:
        return asyncio.run(embed_texts(self.settings, list(texts), 1))


def _unit(v: Any) -> Any:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """24 real-photo variants embedded by Triton (titles "photo N", tags of TAGS), one photo
    with a rare word in its title and a vector far from QUERY, and a burst of four
    near-identical photos close to QUERY's embedding, grouped as near-duplicates."""
    tmp = tmp_path_factory.mktemp("features")
    settings = api_settings(tmp / "data", triton.url, repository)
    with own_store(settings) as store:
        indexed = index_photos(store, settings, tmp / "photos", 24)
        [query] = asyncio.run(embed_texts(settings, [QUERY], 1))
        base = indexed.payloads["photo000.jpg"]
        rng = np.random.default_rng(7)
        planted: dict[str, PhotoPayload] = {}
        points = []
        far = _unit(-np.asarray(query))  # as unlike the query as a vector can be
        planted["rare.jpg"] = {**base, "photo_id": "rare.jpg", "title": f"{RARE} at noon"}
        points.append(PhotoPoint("rare.jpg", far, planted["rare.jpg"]))
        for n, pid in enumerate(BURST):
            noise = rng.normal(0, 0.01, size=np.asarray(query).shape)
            planted[pid] = {
                **base,
                "photo_id": pid,
                "title": f"burst {n}",
                "license": "cc-by" if n < 3 else "royalty-free",
                GROUP_FIELD: "burst/1.jpg",
            }
            points.append(PhotoPoint(pid, _unit(np.asarray(query) + noise), planted[pid]))
        store.upsert(indexed.collection, points)
        records = store.retrieve(indexed.collection, [*indexed.ids, *planted], with_vectors=True)
        with serving(settings, store) as server:
            yield Api(
                server.url,
                settings,
                store,
                indexed,
                {r.photo_id: r.vector for r in records},
                {**indexed.payloads, **planted},
            )


def _exact(api: Api, vector: Any) -> list[str]:
    """Every stored photo, by exact cosine similarity to the vector, best first."""
    scores = {pid: float(np.dot(v, vector)) for pid, v in api.vectors.items()}
    return sorted(scores, key=lambda pid: -scores[pid])


def test_keyword_mode_matches_title_tags_and_photographer_ignoring_case_and_accents(
    api: Api,
) -> None:
    for q in ("zephyrine", "ZÉPHYRINE", "zéphyrine lighthouse"):
        body = api.search(q, mode="keyword")
        assert body["mode"] == "keyword"
        assert body["results"][0]["id"] == "rare.jpg", q
    # Tags and the photographer are words too; the filters still hold. (Every photo: the
    # burst's near-duplicates are "cat" photos too.)
    cats = api.ids("cat", mode="keyword", collapse="false", limit=100)
    assert set(cats) == {p for p, m in api.payloads.items() if "cat" in m["tags"]}
    by_ben = api.ids("ben", mode="keyword", collapse="false", limit=100)
    assert set(by_ben) == {p for p, m in api.payloads.items() if m["photographer"] == "ben"}
    # (Photos of equal BM25 score may come in another order: compare the sets.)
    by_ana = api.ids("cat", mode="keyword", collapse="false", limit=100, photographer="ana")
    assert set(by_ana) == {p for p in cats if api.payloads[p]["photographer"] == "ana"}
    # Pages tile the ranking.
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        body = api.search("cat", mode="keyword", collapse="false", limit=2, offset=offset)
        pages += [r["id"] for r in body["results"]]
        offset = body["next_offset"]
    assert pages == cats
    # A photo holding all the words of a `not` description leaves the keyword ranking.
    assert "rare.jpg" not in api.ids(f"{RARE} noon", mode="keyword", **{"not": "noon"})


def test_vector_mode_does_not_see_the_words_and_hybrid_fuses_both_rankings(api: Api) -> None:
    q = f"{RARE} {QUERY}"
    vector = api.search(q, mode="vector", collapse="false", limit=100)
    assert vector["mode"] == "vector"
    assert vector["results"][-1]["id"] == "rare.jpg"  # its vector is the query's opposite
    words = api.search(q, mode="keyword", collapse="false", limit=100)
    hybrid = api.search(q, collapse="false", limit=100)
    assert hybrid["mode"] == "hybrid"
    # Reciprocal rank fusion of the two rankings, computed here from what each mode answered.
    fused: dict[str, float] = {}
    for ranking in (vector["results"], words["results"]):
        for rank, r in enumerate(ranking, start=1):
            fused[r["id"]] = fused.get(r["id"], 0.0) + 1 / (RRF_K + rank)
    want = sorted(fused, key=lambda pid: -fused[pid])
    assert [r["id"] for r in hybrid["results"]] == want
    assert [r["score"] for r in hybrid["results"]] == pytest.approx([fused[p] for p in want])
    # The rare word lifts its photo from the vector ranking's last place to the top few.
    assert [r["id"] for r in hybrid["results"]].index("rare.jpg") < 3


def test_hybrid_keeps_the_score_threshold_as_a_cosine_similarity(api: Api) -> None:
    [query] = api.embed(f"cat {QUERY}")
    ranked = _exact(api, query)
    scores = [float(np.dot(api.vectors[p], query)) for p in ranked]
    threshold = (scores[9] + scores[10]) / 2
    kept = api.ids(f"cat {QUERY}", collapse="false", limit=100, score_threshold=threshold)
    # Keyword matches too ("cat" photos) only where their cosine is above the threshold.
    assert set(kept) == set(ranked[:10])
    refused = api.get("/v1/search", params={"q": "cat", "mode": "keyword", "score_threshold": 0.1})
    assert refused.status_code == 422 and "mode=keyword" in refused.json()["message"]
    stopwords = api.get("/v1/search", params={"q": "the of a", "mode": "keyword"})
    assert stopwords.status_code == 422 and "no word to match" in stopwords.json()["message"]


def test_not_moves_the_query_away_from_other_descriptions(api: Api) -> None:
    q, away = "a city street at night", "a cat"
    vq, vn = api.embed(q, away)
    for weight in (0.5, 0.9):
        moved = _unit(np.asarray(vq) - weight * np.asarray(vn))
        got = api.ids(
            q, mode="vector", collapse="false", limit=10, not_weight=weight, **{"not": away}
        )
        assert got == _exact(api, moved)[:10], weight
    # Two descriptions: their mean; weight 0 is the plain query.
    vo = api.embed("food on a plate")[0]
    moved = _unit(np.asarray(vq) - 0.5 * (np.asarray(vn) + np.asarray(vo)) / 2)
    response = api.get(
        f"/v1/search?q={q}&mode=vector&collapse=false&limit=10&not={away}&not=food on a plate"
    )
    assert [r["id"] for r in response.json()["results"]] == _exact(api, moved)[:10]
    # The three embeddings ran side by side: the stages still add up to the request's time.
    timing = {
        part.split(";")[0].strip(): float(part.split("dur=")[1].split(";")[0])
        for part in response.headers["Server-Timing"].split(",")
    }
    parts = sum(ms for name, ms in timing.items() if name != "total")
    assert parts == pytest.approx(timing["total"], abs=0.01 * len(timing))
    plain = api.ids(q, mode="vector", collapse="false", limit=10)
    unmoved = api.ids(q, mode="vector", collapse="false", limit=10, not_weight=0, **{"not": away})
    assert unmoved == plain
    posted = httpx.post(
        api.url + "/v1/search",
        json={"q": q, "mode": "vector", "collapse": False, "limit": 10, "not": [away]},
        headers=SEARCH,
    )
    moved = _unit(np.asarray(vq) - 0.5 * np.asarray(vn))
    assert [r["id"] for r in posted.json()["results"]] == _exact(api, moved)[:10]


def test_near_duplicates_collapse_to_one_result_that_names_the_others(api: Api) -> None:
    collapsed = api.search(QUERY, mode="vector", limit=5)
    ids = [r["id"] for r in collapsed["results"]]
    assert [p for p in ids if p in BURST] == [ids[0]]  # the best of the burst stands for it
    top = collapsed["results"][0]
    assert top["duplicates"]["group"] == "burst/1.jpg"
    assert top["duplicates"]["count"] == 3
    assert sorted(top["duplicates"]["ids"]) == sorted(set(BURST) - {top["id"]})
    assert all(r["duplicates"] is None for r in collapsed["results"][1:])
    # The rest of the page is the next photos of the ranking, in order.
    exact = [p for p in _exact(api, api.embed(QUERY)[0]) if p not in BURST]
    assert ids[1:] == exact[:4]
    # The filters hold for the near-duplicates too: one of the burst has another license.
    licensed = api.search(QUERY, mode="vector", limit=5, license="cc-by")["results"][0]
    assert licensed["duplicates"]["count"] == 2
    # Without collapse, every photo of the burst.
    every = api.ids(QUERY, mode="vector", limit=5, collapse="false")
    assert set(BURST) <= set(every[:4])
    # Collapsed pages tile: no group twice, nothing skipped.
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        body = api.search(QUERY, mode="vector", limit=4, offset=offset)
        pages += [r["id"] for r in body["results"]]
        offset = body["next_offset"]
    assert pages == [ids[0], *exact]


def test_a_photos_near_duplicates_and_the_admin_list_of_groups(api: Api) -> None:
    body = api.get("/v1/photos/burst/2.jpg/duplicates").json()
    assert body["group"] == "burst/1.jpg"
    assert [p["id"] for p in body["photos"]] == ["burst/1.jpg", "burst/3.jpg", "burst/4.jpg"]
    alone = api.get("/v1/photos/photo003.jpg/duplicates").json()
    assert alone == {
        "photo_id": "photo003.jpg",
        "group": "photo003.jpg",
        "photos": [],
        "count": 0,
        "limit": 20,
        "offset": 0,
        "next_offset": None,
    }
    assert api.get("/v1/photos/nope.jpg/duplicates").status_code == 404

    assert api.get("/v1/admin/duplicates").status_code == 403
    groups = api.get("/v1/admin/duplicates", ADMIN).json()["groups"]
    assert groups == [{"group": "burst/1.jpg", "size": 4, "ids": sorted(BURST)}]


def test_more_like_these_not_like_those(api: Api) -> None:
    like = "photo004.jpg"
    answer = api.get(f"/v1/photos/{like}/similar", params={"limit": 10}).json()
    similar = [r["id"] for r in answer["results"]]
    liked = api.get("/v1/search/recommend", params={"positive": like, "limit": 10}).json()
    assert [r["id"] for r in liked["results"]] == similar
    assert liked["mode"] is None

    # The photo most like `like` is also the one most like the negative example: it goes.
    unlike = similar[0]
    both = api.get(
        "/v1/search/recommend", params={"positive": like, "negative": unlike, "limit": 10}
    ).json()
    ids = [r["id"] for r in both["results"]]
    assert like not in ids and unlike not in ids
    closer_to_unlike = {
        p
        for p in api.vectors
        if float(np.dot(api.vectors[p], api.vectors[unlike]))
        > float(np.dot(api.vectors[p], api.vectors[like]))
    }
    # Best-score strategy: a photo closer to a negative example ranks below every other.
    ranked_positive = [p for p in ids if p not in closer_to_unlike]
    assert ids[: len(ranked_positive)] == ranked_positive

    posted = httpx.post(
        api.url + "/v1/search/recommend",
        json={"positive": [like, "photo007.jpg"], "negative": [unlike], "limit": 5},
        headers=SEARCH,
    )
    assert posted.status_code == 200
    assert {like, "photo007.jpg", unlike}.isdisjoint(r["id"] for r in posted.json()["results"])
    missing = api.get("/v1/search/recommend", params={"positive": "nope.jpg"})
    assert missing.status_code == 404 and "nope.jpg" in missing.json()["message"]
    assert api.get("/v1/search/recommend", params={"negative": like}).status_code == 422


def test_diversity_trades_the_near_identical_for_the_different(api: Api) -> None:
    plain = api.ids(QUERY, mode="vector", collapse="false", limit=4)
    assert set(plain) == set(BURST)  # the burst fills the top four
    diverse = api.ids(QUERY, mode="vector", collapse="false", limit=4, diversity=0.7)
    assert diverse[0] == plain[0]  # the most relevant is still first
    assert diverse[1] not in BURST  # and the next is not its near-identical twin
    # Maximal marginal relevance over every photo (the pool holds them all), recomputed
    # here from the stored vectors: relevance is the cosine scaled to 0..1 over the pool.
    [query] = api.embed(QUERY)
    ids = _exact(api, query)
    vectors = np.stack([api.vectors[p] for p in ids])
    cosine = vectors @ np.asarray(query)
    relevance = (cosine - cosine.min()) / (cosine.max() - cosine.min())
    chosen: list[int] = []
    for _ in range(4):
        value = [
            -np.inf
            if i in chosen
            else 0.3 * relevance[i]
            - 0.7 * max((vectors[i] @ vectors[j] for j in chosen), default=0)
            for i in range(len(ids))
        ]
        chosen.append(int(np.argmax(value)))
    assert diverse == [ids[i] for i in chosen]
    # Diversity 0 is the ranking itself.
    assert api.ids(QUERY, mode="vector", collapse="false", limit=4, diversity=0) == plain


def test_newest_first_orders_the_relevant_candidates_by_date(api: Api) -> None:
    [query] = api.embed(QUERY)
    ranked = _exact(api, query)
    scores = {p: float(np.dot(api.vectors[p], query)) for p in ranked}
    threshold = (scores[ranked[11]] + scores[ranked[12]]) / 2
    body = api.search(
        QUERY, mode="vector", collapse="false", sort="newest", limit=100, score_threshold=threshold
    )
    got = [r["id"] for r in body["results"]]
    assert set(got) == set(ranked[:12])
    dates = [r["metadata"]["created_at"] for r in body["results"]]
    assert dates == sorted(dates, reverse=True)


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"mode": "fuzzy"}, "mode"),
        ({"sort": "oldest"}, "sort"),
        ({"diversity": 2}, "diversity"),
        ({"collapse": "maybe"}, "collapse"),
        ({"not_weight": -1}, "not_weight"),
        ({"not": " "}, "blank"),
    ],
)
def test_bad_options_are_refused_with_a_message(
    api: Api, params: dict[str, Any], says: str
) -> None:
    response = api.get("/v1/search", params={"q": "cat", **params})
    assert response.status_code == 422
    assert says in response.text
