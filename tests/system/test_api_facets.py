"""Facet counts through /v1/search, against real Triton, real Redis and Qdrant Edge: each count
equals one recomputed here from the stored payloads of the photos counted over, which the test
finds itself: every photo above the score threshold by exact cosine similarity, or the first
PHOTOSEARCH_API__FACET_POOL of the ranking."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest

from core.payload import PhotoPayload
from core.settings import Settings
from core.vectorstore import VectorStore
from model.triton_server import TritonServer
from tests.support.api import (
    SEARCH_KEY,
    Indexed,
    api_settings,
    embed_images,
    embed_texts,
    indexed_api,
)

SEARCH = {"X-API-Key": SEARCH_KEY}
PHOTOS = 30
POOL = 12  # PHOTOSEARCH_API__FACET_POOL here: fewer than the photos
QUERY = "a cat sitting on a city street at night"
ALL_FACETS = "tags,auto_tags,color,orientation,license,photographer"
# The API's facet names -> the payload fields they count.
FIELDS = {
    "tags": "tags",
    "auto_tags": "auto_tags",
    "color": "colors",
    "orientation": "orientation",
    "license": "license",
    "photographer": "photographer",
}
COLORS = ("red", "blue", "green", "white", "black")


def visual(i: int) -> PhotoPayload:
    """What the indexer derives of photo i: colours, orientation, automatic tags; none for
    one photo in four (indexed before them)."""
    if i % 4 == 0:
        return {}
    first, second = COLORS[i % 5], COLORS[(i * 3 + 1) % 5]
    shares = {first: 0.6, second: 0.4} if first != second else {first: 1.0}
    return {
        "colors": list(shares),
        "color_shares": shares,
        "orientation": ("landscape", "portrait", "square")[i % 3],
        "auto_tags": ["outdoors", "people"][: 1 + i % 2] if i % 3 else ["studio"],
    }


@dataclass
class Api:
    url: str
    store: VectorStore
    indexed: Indexed
    vectors: dict[str, Any]
    query: Any  # QUERY's embedding, as the API embeds it
    settings: Settings

    def search(self, path: str = "/v1/search", **params: Any) -> dict[str, Any]:
        answer = httpx.get(self.url + path, params=params, headers=SEARCH, timeout=60)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def by_cosine(self, vector: Any, exclude: Sequence[str] = ()) -> list[tuple[str, float]]:
        """Every stored photo by exact cosine similarity to the vector, best first."""
        scores = {
            pid: float(np.dot(v, vector)) for pid, v in self.vectors.items() if pid not in exclude
        }
        return sorted(scores.items(), key=lambda ps: -ps[1])

    def recounted(self, photo_ids: Sequence[str], facets: str) -> dict[str, list[list[Any]]]:
        """Each facet's counts over these photos' payloads, as stored: most first, equal
        counts by value."""
        stored = self.store.retrieve(self.indexed.collection, list(photo_ids))
        assert len(stored) == len(set(photo_ids))
        counts = {}
        for name in facets.split(","):
            held: Counter[str] = Counter()
            for photo in stored:
                value = photo.payload.get(FIELDS[name])
                held.update(
                    set(value) if isinstance(value, list) else [] if value is None else [str(value)]
                )
            counts[name] = [[v, n] for v, n in sorted(held.items(), key=lambda vn: (-vn[1], vn[0]))]
        return counts


def counts_of(answer: dict[str, Any]) -> dict[str, list[list[Any]]]:
    fields = answer["facets"]["fields"]
    return {name: [[v["value"], v["count"]] for v in values] for name, values in fields.items()}


def matching(api: Api, holds: Callable[[PhotoPayload], bool]) -> set[str]:
    return {pid for pid, payload in api.indexed.payloads.items() if holds(payload)}


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """PHOTOS real-photo variants embedded by Triton (tags of tests.support.api's TAGS, three
    photographers, two licences), served with a facet pool of POOL."""
    tmp = tmp_path_factory.mktemp("facets")
    settings = api_settings(tmp / "data", triton.url, repository, facet_pool=POOL)
    with indexed_api(settings, tmp / "photos", PHOTOS) as served:
        indexed = served.indexed
        for n, pid in enumerate(indexed.ids):
            indexed.payloads[pid] |= visual(n)
        served.store.set_payloads(indexed.collection, indexed.payloads)
        records = served.store.retrieve(indexed.collection, indexed.ids, with_vectors=True)
        [query] = asyncio.run(embed_texts(settings, [QUERY], 1))
        yield Api(
            served.server.url,
            served.store,
            indexed,
            {r.photo_id: r.vector for r in records},
            query,
            settings,
        )


def test_without_a_threshold_the_ranking_s_first_photos_are_counted(api: Api) -> None:
    answer = api.search(q=QUERY, mode="vector", facets=ALL_FACETS, limit=5)
    pool = [pid for pid, _ in api.by_cosine(api.query)[:POOL]]
    assert {k: v for k, v in answer["facets"].items() if k != "fields"} == {
        "over": "pool",
        "photos": POOL,
        "capped": True,
    }
    assert counts_of(answer) == api.recounted(pool, ALL_FACETS)
    assert len(answer["results"]) == 5  # the page is as without facets


def test_a_filtered_hybrid_search_counts_the_photos_that_match(api: Api) -> None:
    # Fewer photos match than the pool holds: all of them are its candidates.
    answer = api.search(q=QUERY, license="cc-by", photographer="ana", facets=ALL_FACETS)
    want = matching(api, lambda p: p["license"] == "cc-by" and p["photographer"] == "ana")
    assert 0 < len(want) < POOL
    assert (answer["facets"]["photos"], answer["facets"]["capped"]) == (len(want), False)
    assert counts_of(answer) == api.recounted(sorted(want), ALL_FACETS)
    assert counts_of(answer)["license"] == [["cc-by", len(want)]]


def test_the_visual_filters_narrow_the_counts(api: Api) -> None:
    answer = api.search(q=QUERY, color="red", orientation="portrait", facets=ALL_FACETS)
    want = matching(
        api,
        lambda p: (
            p.get("color_shares", {}).get("red", 0) >= 0.05 and p.get("orientation") == "portrait"
        ),
    )
    assert 0 < len(want) < POOL and answer["facets"]["photos"] == len(want)
    assert counts_of(answer) == api.recounted(sorted(want), ALL_FACETS)
    assert ["red", len(want)] in counts_of(answer)["color"]


def test_a_keyword_search_counts_its_matches(api: Api) -> None:
    answer = api.search(q="cat", mode="keyword", facets="tags,photographer", facet_limit=2)
    want = matching(api, lambda p: "cat" in p["tags"])
    assert answer["facets"]["photos"] == len(want) < POOL
    assert counts_of(answer) == {
        name: counts[:2]
        for name, counts in api.recounted(sorted(want), "tags,photographer").items()
    }
    assert counts_of(answer)["tags"][0] == ["cat", len(want)]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_with_a_threshold_every_photo_above_it_is_counted(api: Api, mode: str) -> None:
    ranked = api.by_cosine(api.query)
    # Between the 8th and 9th: well inside the pool, away from any score.
    threshold = (ranked[7][1] + ranked[8][1]) / 2
    above = [pid for pid, score in ranked if score >= threshold]
    answer = api.search(
        q=QUERY, mode=mode, score_threshold=threshold, facets=ALL_FACETS, collapse="false"
    )
    assert len(above) == 8
    assert {k: v for k, v in answer["facets"].items() if k != "fields"} == {
        "over": "score_threshold",
        "photos": 8,
        "capped": False,
    }
    assert counts_of(answer) == api.recounted(above, ALL_FACETS)


def test_a_threshold_and_a_filter_count_the_photos_that_pass_both(api: Api) -> None:
    ranked = api.by_cosine(api.query)
    threshold = (ranked[15][1] + ranked[16][1]) / 2
    licensed = matching(api, lambda p: p["license"] == "royalty-free")
    above = [pid for pid, score in ranked if score >= threshold and pid in licensed]
    answer = api.search(
        q=QUERY, score_threshold=threshold, license="royalty-free", facets="tags,photographer"
    )
    assert 0 < len(above) < POOL and answer["facets"]["photos"] == len(above)
    assert counts_of(answer) == api.recounted(above, "tags,photographer")


def test_more_photos_above_the_threshold_than_the_pool_are_capped(api: Api) -> None:
    answer = api.search(q=QUERY, mode="vector", score_threshold=-1.0, facets="license")
    best = [pid for pid, _ in api.by_cosine(api.query)[:POOL]]
    assert (answer["facets"]["photos"], answer["facets"]["capped"]) == (POOL, True)
    assert counts_of(answer) == api.recounted(best, "license")


def test_more_like_this_counts_its_neighbours_without_the_photo(api: Api) -> None:
    photo = api.indexed.ids[3]
    answer = api.search(f"/v1/photos/{quote(photo)}/similar", facets="tags,license")
    near = [pid for pid, _ in api.by_cosine(api.vectors[photo], exclude=[photo])[:POOL]]
    assert answer["facets"]["photos"] == POOL
    assert counts_of(answer) == api.recounted(near, "tags,license")


def test_a_recommendation_counts_its_ranking_without_the_examples(api: Api) -> None:
    photo = api.indexed.ids[7]
    answer = api.search("/v1/search/recommend", positive=photo, facets="photographer,tags")
    # One positive example: each photo scores its cosine similarity to it.
    near = [pid for pid, _ in api.by_cosine(api.vectors[photo], exclude=[photo])[:POOL]]
    assert answer["facets"]["photos"] == POOL
    assert counts_of(answer) == api.recounted(near, "photographer,tags")


def test_an_image_search_counts_the_photos_nearest_the_image(api: Api) -> None:
    data = api.indexed.files[api.indexed.ids[11]].read_bytes()
    answer = httpx.post(
        api.url + "/v1/search/image",
        params={"facets": "license,color", "score_threshold": 0.5},
        files={"file": ("query.jpg", data, "image/jpeg")},
        headers=SEARCH,
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    [image] = asyncio.run(embed_images(api.settings, [data], 1))
    above = [pid for pid, score in api.by_cosine(image) if score >= 0.5]
    facets = answer.json()["facets"]
    assert facets["over"] == "score_threshold" and facets["photos"] == min(len(above), POOL)
    assert counts_of(answer.json()) == api.recounted(above[:POOL], "license,color")


def test_facets_come_with_the_first_page_and_their_stage_is_timed(api: Api) -> None:
    first = httpx.get(
        api.url + "/v1/search", params={"q": QUERY, "facets": "tags"}, headers=SEARCH, timeout=60
    )
    assert first.status_code == 200 and first.json()["facets"] is not None
    assert "facets;dur=" in first.headers["server-timing"]
    later = api.search(q=QUERY, facets="tags", offset=5)
    plain = api.search(q=QUERY)
    assert later["facets"] is None and plain["facets"] is None
    unknown = httpx.get(
        api.url + "/v1/search", params={"q": QUERY, "facets": "tags,colour"}, headers=SEARCH
    )
    assert unknown.status_code == 422 and "the facets are tags" in unknown.json()["message"]
