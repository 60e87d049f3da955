"""The query API against real Triton, real Redis and a real Qdrant Edge store over HTTP."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from redis import Redis

from core.payload import PhotoPayload
from core.querycache import cache_key, normalize_query
from core.settings import Settings
from core.vectorstore import PhotoPoint, VectorStore
from model.triton_server import TritonServer
from query_api.schemas.search import MAX_LIMIT
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    Indexed,
    api_settings,
    embed_texts,
    indexed_store,
    metric,
    ok_json,
    serving,
)
from tests.support.images import encode
from tests.support.waiting import wait_until

PLANTED = "planted/red-bicycle.jpg"
PLANTED_QUERY = "a red bicycle against a brick wall"
SEARCH = {"X-API-Key": SEARCH_KEY}
ADMIN = {"X-API-Key": ADMIN_KEY}


@dataclass
class Api:
    url: str
    metrics_url: str
    settings: Settings
    store: VectorStore
    indexed: Indexed
    vectors: dict[str, Any]  # photo id -> stored vector
    payloads: dict[str, PhotoPayload]  # photo id -> stored payload

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=SEARCH if headers is None else headers, **kw)

    def search(
        self, q: str, headers: dict[str, str] | None = None, **params: Any
    ) -> dict[str, Any]:
        # These tests check the vector ranking against an exact one: the embedding's mode
        # (test_api_search_features.py has the hybrid and keyword ones).
        return ok_json(self.get("/v1/search", headers, params={"q": q, "mode": "vector", **params}))


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """24 real-photo variants embedded by Triton, plus one point planted at a query's embedding."""
    tmp = tmp_path_factory.mktemp("api")
    settings = api_settings(tmp / "data", triton.url, repository, cache_ttl_s=2, docs=True)
    with indexed_store(settings, tmp / "photos", 24) as (store, indexed):
        [text_vector] = asyncio.run(embed_texts(settings, [PLANTED_QUERY], 1))
        planted: PhotoPayload = {
            **indexed.payloads["photo000.jpg"],
            "photo_id": PLANTED,
            "title": "planted",
        }
        store.upsert(indexed.collection, [PhotoPoint(PLANTED, text_vector, planted)])
        records = store.retrieve(indexed.collection, [*indexed.ids, PLANTED], with_vectors=True)
        vectors = {r.photo_id: r.vector for r in records}
        with serving(settings, store) as server:
            yield Api(
                server.url,
                server.metrics_url,
                settings,
                store,
                indexed,
                vectors,
                {**indexed.payloads, PLANTED: planted},
            )


def brute_force(api: Api, vector: Any, ids: list[str] | None = None) -> list[tuple[str, float]]:
    """Exact cosine ranking over the stored vectors, best first."""
    candidates = ids if ids is not None else list(api.vectors)
    # The store keeps float16 originals and compares the query as float16 too.
    query = np.asarray(vector, dtype=np.float16).astype(np.float32)
    scores = [(pid, float(np.dot(api.vectors[pid], query))) for pid in candidates]
    return sorted(scores, key=lambda s: -s[1])


def test_text_search_ranks_by_the_query_embedding_and_caches_it_until_the_ttl(api: Api) -> None:
    misses = metric(api.metrics_url, "photosearch_query_cache_total", result="miss")
    hits = metric(api.metrics_url, "photosearch_query_cache_total", result="hit")
    # Whether the cache answered is told to an operator's (admin) key only.
    first = api.search("  A RED bicycle   against a brick wall ", ADMIN, limit=10)

    assert first["results"][0]["id"] == PLANTED
    assert first["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert first["model_version"] == 1 and first["collection"] == api.indexed.collection
    assert first["cached"] is False
    # The whole ranking equals an exact search with Triton's embedding of the query.
    [query] = asyncio.run(embed_texts(api.settings, [PLANTED_QUERY], 1))
    expected = brute_force(api, query)[:10]
    assert [r["id"] for r in first["results"]] == [pid for pid, _ in expected]
    assert [r["score"] for r in first["results"]] == pytest.approx([s for _, s in expected], 1e-4)

    again = api.search(PLANTED_QUERY, ADMIN, limit=10)  # the same normalized query
    assert again["cached"] is True
    assert [r["id"] for r in again["results"]] == [r["id"] for r in first["results"]]
    assert metric(api.metrics_url, "photosearch_query_cache_total", result="miss") == misses + 1
    assert metric(api.metrics_url, "photosearch_query_cache_total", result="hit") == hits + 1
    # Any other caller cannot tell that someone searched this phrase before.
    assert api.search(PLANTED_QUERY, limit=10)["cached"] is None

    # Kept for the ttl: Redis drops it then. Rather than wait, the test lets it expire now.
    cache = Redis.from_url(api.settings.redis.cache_url or api.settings.redis.url)
    key = cache_key(api.settings.redis.prefix, 1, normalize_query(PLANTED_QUERY))
    assert 0 < cache.pttl(key) <= api.settings.api.cache_ttl_s * 1000
    cache.pexpire(key, 1)
    wait_until(lambda: not cache.exists(key), 60, "the cached embedding expired")
    cache.close()
    assert api.search(PLANTED_QUERY, ADMIN, limit=10)["cached"] is False
    assert api.search(PLANTED_QUERY, ADMIN, limit=10)["cached"] is True


def test_results_carry_metadata_and_the_page_urls(api: Api) -> None:
    body = api.search("a photo", limit=5)
    result = next(r for r in body["results"] if r["id"] != PLANTED)
    stored = api.indexed.payloads[result["id"]]
    assert result["metadata"]["title"] == stored["title"]
    assert result["metadata"]["tags"] == stored["tags"]
    assert result["metadata"]["photographer"] == stored["photographer"]
    assert result["model_version"] == 1
    assert result["thumbnail_url"] == f"/v1/photos/{result['id']}/thumbnail"
    assert api.get(f"/v1/photos/{result['id']}").json()["metadata"] == result["metadata"]

    original = api.get(result["image_url"])
    assert original.status_code == 200
    assert original.content == api.indexed.files[result["id"]].read_bytes()
    assert original.headers["content-type"] == "image/jpeg"
    thumb = api.get(result["thumbnail_url"])
    assert thumb.headers["content-type"] == "image/jpeg"
    image = Image.open(io.BytesIO(thumb.content))
    assert image.format == "JPEG" and max(image.size) <= api.settings.api.thumbnail_size
    not_modified = api.get(
        result["thumbnail_url"], {**SEARCH, "If-None-Match": thumb.headers["etag"]}
    )
    assert not_modified.status_code == 304


def test_filters_select_by_metadata_and_pages_tile_the_ranking(api: Api) -> None:
    [query] = asyncio.run(embed_texts(api.settings, ["a city at night"], 1))
    payloads = api.payloads

    def expected(keep: Any) -> list[str]:
        ids = [pid for pid, p in payloads.items() if keep(p)]
        return [pid for pid, _ in brute_force(api, query, ids)]

    cases: list[tuple[dict[str, Any], Any]] = [
        ({"tags_any": ["cat", "space"]}, lambda p: {"cat", "space"} & set(p["tags"])),
        ({"tags_all": ["city", "food"]}, lambda p: {"city", "food"} <= set(p["tags"])),
        ({"photographer": "ana"}, lambda p: p["photographer"] == "ana"),
        ({"license": "cc-by"}, lambda p: p["license"] == "cc-by"),
        (
            {"created_from": "2024-02-01T00:00:00Z", "created_to": "2024-04-01T00:00:00Z"},
            lambda p: "2024-02-01" <= p["created_at"][:10] < "2024-04-01",
        ),
    ]
    for params, keep in cases:
        body = api.search("a city at night", limit=MAX_LIMIT, **params)
        want = expected(keep)
        assert want, params
        assert [r["id"] for r in body["results"]] == want, params
        posted = httpx.post(
            api.url + "/v1/search",
            json={"q": "a city at night", "mode": "vector", "limit": 100, **params},
            headers=SEARCH,
        ).json()
        assert [r["id"] for r in posted["results"]] == want, params

    everything = [r["id"] for r in api.search("a city at night", limit=25)["results"]]
    pages = []
    offset: int | None = 0
    while offset is not None:
        body = api.search("a city at night", limit=7, offset=offset)
        pages += [r["id"] for r in body["results"]]
        offset = body["next_offset"]
    assert pages == everything and len(pages) == 25
    offsets: list[int] = []
    offset = 0
    while offset is not None:  # 25 = 5 x 5: the fifth page is the last, no empty sixth
        body = api.search("a city at night", limit=5, offset=offset)
        assert len(body["results"]) == 5
        offsets.append(offset)
        offset = body["next_offset"]
    assert offsets == [0, 5, 10, 15, 20]

    ranked = api.search("a city at night", limit=25)["results"]
    threshold = (ranked[5]["score"] + ranked[6]["score"]) / 2
    kept = api.search("a city at night", limit=25, score_threshold=threshold)["results"]
    assert [r["id"] for r in kept] == [r["id"] for r in ranked[:6]]


def test_image_search_finds_an_altered_copy_and_more_like_this_excludes_the_photo(
    api: Api,
) -> None:
    original = Image.open(api.indexed.files["photo005.jpg"])
    w, h = original.size
    altered = original.crop((8, 8, w - 8, h - 8)).resize((140, 140))
    response = httpx.post(
        api.url + "/v1/search/image",
        params={"limit": 5},
        files={"file": ("query.jpg", encode(altered, "JPEG", quality=60), "image/jpeg")},
        headers=SEARCH,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["results"][0]["id"] == "photo005.jpg" and body["cached"] is None

    similar = api.get("/v1/photos/photo005.jpg/similar", params={"limit": 10}).json()
    ids = [r["id"] for r in similar["results"]]
    assert "photo005.jpg" not in ids and len(ids) == 10
    want = brute_force(api, api.vectors["photo005.jpg"])
    assert ids == [pid for pid, _ in want if pid != "photo005.jpg"][:10]
    assert similar["model_version"] == 1

    nested = api.get(f"/v1/photos/{PLANTED}/similar", params={"limit": 3}).json()
    assert PLANTED not in [r["id"] for r in nested["results"]]  # ids with slashes route


def test_api_keys_scopes_and_counts_per_key(api: Api) -> None:
    assert api.get("/v1/search?q=cat", headers={}).status_code == 401
    wrong = api.get("/v1/search?q=cat", headers={"X-API-Key": "nope"})
    assert wrong.status_code == 401 and wrong.json()["message"] == "unknown API key"
    assert api.get("/v1/search?q=cat", headers={"Authorization": f"Bearer {SEARCH_KEY}"}).is_success
    denied = api.get("/v1/admin/jobs", headers=SEARCH)
    assert denied.status_code == 403 and "admin" in denied.json()["message"]
    assert api.get("/v1/admin/jobs", headers=ADMIN).status_code == 200
    assert api.get("/v1/admin/jobs", headers={}).status_code == 401

    before = metric(api.metrics_url, "photosearch_requests_by_key_total", key="ops-admin")
    for _ in range(3):
        assert api.get("/v1/search?q=cat", headers=ADMIN).is_success
    assert (
        metric(api.metrics_url, "photosearch_requests_by_key_total", key="ops-admin") == before + 3
    )
    assert metric(api.metrics_url, "photosearch_requests_by_key_total", key="invalid") >= 1


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "says"),
    [
        ("GET", "/v1/search", {}, 422, "q: Field required"),
        ("GET", "/v1/search?q=", {}, 422, "q: String should have at least 1 character"),
        ("GET", "/v1/search?q=%20%20", {}, 422, "blank"),
        ("GET", "/v1/search?q=" + "x" * 501, {}, 422, "at most 500"),
        ("GET", "/v1/search?q=a%00b", {}, 422, "control characters"),
        ("GET", "/v1/search?q=cat&limit=0", {}, 422, "limit"),
        ("GET", "/v1/search?q=cat&limit=101", {}, 422, "less than or equal to 100"),
        ("GET", "/v1/search?q=cat&limit=ten", {}, 422, "valid integer"),
        ("GET", "/v1/search?q=cat&offset=-1", {}, 422, "offset"),
        ("GET", "/v1/search?q=cat&offset=20000", {}, 422, "offset"),
        ("GET", "/v1/search?q=cat&created_from=yesterday", {}, 422, "created_from"),
        (
            "GET",
            "/v1/search?q=cat&created_from=2025-01-01T00:00:00Z&created_to=2024-01-01T00:00:00Z",
            {},
            422,
            "created_from is after created_to",
        ),
        ("GET", "/v1/search?q=cat&score_threshold=2", {}, 422, "score_threshold"),
        ("GET", "/v1/search?q=cat&tags_any=", {}, 422, "tag"),
        ("GET", "/v1/search?q=cat&colour=red", {}, 422, "colour: Extra inputs are not permitted"),
        ("POST", "/v1/search", {"content": b"{not json"}, 422, "must be a JSON object"),
        (
            "POST",
            "/v1/search",
            {"content": b"{not json", "headers": {**SEARCH, "Content-Type": "application/json"}},
            422,
            "JSON decode error",
        ),
        ("POST", "/v1/search", {"json": ["cat"]}, 422, "must be a JSON object"),
        ("POST", "/v1/search", {"json": {"q": "cat", "limit": "many"}}, 422, "limit"),
        ("POST", "/v1/search", {"json": {"q": 5}}, 422, "q"),
        ("POST", "/v1/search/image", {}, 422, "file: Field required"),
        ("POST", "/v1/search/image", {"files": {"file": ("a.jpg", b"")}}, 422, "empty file"),
        (
            "POST",
            "/v1/search/image",
            {"files": {"file": ("a.jpg", b"<html>hello</html>")}},
            422,
            "not an image",
        ),
        ("GET", "/v1/photos/nope.jpg", {}, 404, "no photo 'nope.jpg'"),
        ("GET", "/v1/photos/nope.jpg/similar", {}, 404, "no photo 'nope.jpg'"),
        ("GET", "/v1/photos/nope.jpg/thumbnail", {}, 404, "no photo"),
        ("GET", "/v1/admin/jobs/nope", {"headers": ADMIN}, 404, "no job 'nope'"),
        (
            "POST",
            "/v1/admin/reindex",
            {"headers": ADMIN, "json": {"model_version": 99}},
            422,
            "model version 99 is not exported",
        ),
        (
            "POST",
            "/v1/admin/reindex",
            {"headers": ADMIN, "json": {"model_version": 0}},
            422,
            "model_version",
        ),
        (
            "POST",
            "/v1/admin/sync",
            {"headers": ADMIN, "json": {"source": "ftp://x/y"}},
            422,
            "ftp://x/y",
        ),
        # urlparse raises on an unclosed IPv6 bracket: this was a 500 (issue 8).
        (
            "POST",
            "/v1/admin/sync",
            {"headers": ADMIN, "json": {"source": "s3://[bucket/photos"}},
            422,
            "'s3://[bucket/photos': use a folder",
        ),
        (
            "POST",
            "/v1/admin/reindex",
            {"headers": ADMIN, "json": {"model_version": 1, "source": "file://[::1"}},
            422,
            "'file://[::1': use a folder",
        ),
        ("POST", "/v1/admin/sync", {"headers": ADMIN, "json": {"source": 5}}, 422, "source"),
        ("GET", "/v1/search?q=del%7Fete", {}, 422, "control characters"),
        ("GET", "/v1/search?q=c1%C2%85", {}, 422, "control characters"),
        (
            "POST",
            "/v1/search",
            {
                "content": b'{"q": "cat", "tags_any": ["\\udfff"]}',
                "headers": {**SEARCH, "Content-Type": "application/json"},
            },
            422,
            "lone surrogate",
        ),
        ("DELETE", "/v1/search?q=cat", {}, 405, "Method Not Allowed"),
        ("GET", "/v2/nothing", {}, 404, "Not Found"),
    ],
)
def test_bad_input_gets_a_4xx_json_error_that_says_what_was_wrong(
    api: Api, method: str, path: str, kwargs: dict[str, Any], status: int, says: str
) -> None:
    headers = kwargs.pop("headers", SEARCH)
    response = httpx.request(method, api.url + path, headers=headers, **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert says in body["message"], body
    assert body["error"]


def test_uploads_over_the_byte_or_pixel_limit_are_refused_with_413(
    api: Api, triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    settings = api_settings(
        tmp_path / "data", triton.url, repository, max_upload_bytes=50_000, max_upload_pixels=10_000
    )
    with serving(settings, api.store) as small:
        big = np.random.default_rng(0).integers(0, 255, (400, 400, 3), dtype=np.uint8)
        data = encode(Image.fromarray(big), "PNG")
        assert len(data) > 50_000 + 64 * 1024
        response = httpx.post(
            small.url + "/v1/search/image", files={"file": ("a.png", data)}, headers=SEARCH
        )
        assert response.status_code == 413 and "larger than" in response.json()["message"]
        pixels = encode(Image.new("RGB", (200, 200), "red"), "PNG")  # 40k pixels, tiny file
        response = httpx.post(
            small.url + "/v1/search/image", files={"file": ("a.png", pixels)}, headers=SEARCH
        )
        assert response.status_code == 413 and "pixels" in response.json()["message"]


def test_openapi_documents_every_endpoint_and_health_answers(api: Api) -> None:
    schema = httpx.get(api.url + "/openapi.json").json()
    paths = schema["paths"]
    for path in (
        "/v1/search",
        "/v1/search/image",
        "/v1/model",
        "/v1/photos/{photo_id}",
        "/v1/photos/{photo_id}/similar",
        "/v1/photos/{photo_id}/thumbnail",
        "/v1/photos/{photo_id}/image",
        "/v1/admin/sync",
        "/v1/admin/reindex",
        "/v1/admin/rollback",
        "/v1/admin/jobs",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path
    params = {p["name"] for p in paths["/v1/search"]["get"]["parameters"]}
    assert {"q", "limit", "offset", "tags_any", "photographer", "score_threshold"} <= params
    assert httpx.get(api.url + "/healthz").json() == {"status": "ok"}
    page = httpx.get(api.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert httpx.get(api.url + "/static/app.js").headers["cache-control"] == "no-cache"
    ready = httpx.get(api.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    api.search("a fresh query for the metrics")
    assert api.get("/v1/search?q=cat&limit=0").status_code == 422
    assert httpx.get(api.url + "/metrics").status_code == 404  # not on the public port
    text = httpx.get(api.metrics_url).text
    for name in (
        "photosearch_http_request_duration_seconds_bucket",
        "photosearch_triton_request_duration_seconds_bucket",
        "photosearch_vector_search_duration_seconds_bucket",
        "photosearch_query_cache_total",
        "photosearch_requests_by_key_total",
        "photosearch_http_errors_total",
    ):
        assert name in text, name
    assert 'route="/v1/search"' in text
    # Readiness is exported per dependency for the alerts; nothing is in flight between calls.
    for dependency in ("vector_store", "triton", "redis"):
        assert metric(api.metrics_url, "photosearch_dependency_ready", dependency=dependency) == 1
    assert metric(api.metrics_url, "photosearch_http_requests_in_flight") == 0


def test_model_names_the_live_version_and_its_weights_without_a_server_path(api: Api) -> None:
    response = api.get("/v1/model")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "model_version": 1,
        "collection": api.indexed.collection,
        "arch": "tiny-clip.json",
        "weights": "tiny-clip.pt",
        "random_weights": False,
        "embedding_dim": 32,
    }
    assert httpx.get(api.url + "/v1/model").status_code == 401  # a search key is needed


def redis_count(redis: Redis, api: Api, query: str) -> float:
    from datetime import UTC, datetime

    from core.querycache import popular_key

    key = popular_key(api.settings.redis.prefix, datetime.now(UTC))
    return float(redis.zscore(key, query) or 0)


def test_popular_queries_are_counted_by_their_normalized_form(api: Api) -> None:
    from core.querycache import popular_queries

    for _ in range(3):
        api.search("Sunset  over the SEA")
    api.search("a dog")
    redis = Redis.from_url(api.settings.redis.url)

    def counted() -> list[str] | None:  # counts are written after the answer has left
        top = popular_queries(redis, api.settings.redis.prefix, days=7, n=50)
        sunsets = redis_count(redis, api, "sunset over the sea")
        return top if "a dog" in top and sunsets >= 3 else None

    top = wait_until(
        counted, 60, lambda: str(popular_queries(redis, api.settings.redis.prefix, days=7, n=50))
    )
    assert normalize_query("Sunset  over the SEA") == "sunset over the sea"
    assert top.index("sunset over the sea") < top.index("a dog")
