"""Degradation, never a hang: Redis or Triton stopped in the middle, and recovery once back.

Each test runs its own Redis or Triton process, so stopping it leaves the session's alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from core.querycache import cache_key, normalize_query
from core.vectorstore import open_store
from harness.processes import free_ports, triton_ports
from model.triton_server import TritonServer
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    api_settings,
    index_photos,
    metric,
    own_store,
    serving,
)
from tests.support.redisserver import RedisServer
from tests.support.waiting import wait_until

SEARCH = {"X-API-Key": SEARCH_KEY}
# An operator's key: only it is told whether the query embedding came from the cache.
OPERATOR = {"X-API-Key": ADMIN_KEY}


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def search(url: str, q: str) -> tuple[int, dict[str, Any]]:
    """A search's status and body (its headers under "_headers"). Its timeout only bounds a
    hang: how fast a degraded API answers is a benchmark's figure, not a test's bound."""
    response = httpx.get(
        url + "/v1/search", params={"q": q, "limit": 5}, headers=OPERATOR, timeout=30
    )
    return response.status_code, response.json() | {"_headers": dict(response.headers)}


def test_redis_stopped_mid_test_searches_still_answer_and_the_cache_returns(
    triton: TritonServer, repository: Path, tmp_path: Path, private_redis: RedisServer
) -> None:
    settings = api_settings(
        tmp_path / "data", triton.url, repository, redis_url=private_redis.url, redis_retry_s=0.5
    )
    store = open_store(settings)
    index_photos(store, settings, tmp_path / "photos", 8)
    try:
        with serving(settings, store) as api:
            status, first = search(api.url, "a quiet harbour")
            assert status == 200 and first["cached"] is False
            assert search(api.url, "a quiet harbour")[1]["cached"] is True

            private_redis.stop()
            for q in ("a quiet harbour", "a busy market", "a busy market", "snow"):
                status, body = search(api.url, q)
                assert status == 200, body
                assert body["cached"] is False and len(body["results"]) == 5
            # Bypassed: connection refused, then no Redis call for redis_retry_s.
            assert metric(api.metrics_url, "photosearch_query_cache_total", result="bypass") >= 4
            ready = httpx.get(api.url + "/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "degraded"
            assert ready.json()["checks"]["redis"]["ok"] is False
            assert metric(api.metrics_url, "photosearch_dependency_ready", dependency="redis") == 0
            assert metric(api.metrics_url, "photosearch_dependency_ready", dependency="triton") == 1

            private_redis.start()
            # Once redis_retry_s has passed, a search fills the cache again and the next is
            # answered from it.
            wait_until(
                lambda: search(api.url, "a busy market")[1]["cached"] is True,
                60,
                "the cache answering again after Redis's return",
            )
            assert httpx.get(api.url + "/readyz").json()["status"] == "ready"
            assert metric(api.metrics_url, "photosearch_dependency_ready", dependency="redis") == 1
    finally:
        store.close()


def test_a_cache_redis_of_its_own_holds_the_cache_and_the_jobs_stay_in_the_queue_redis(
    triton: TritonServer, repository: Path, tmp_path: Path, private_redis: RedisServer
) -> None:
    base = api_settings(tmp_path / "data", triton.url, repository)
    settings = base.model_copy(
        update={"redis": base.redis.model_copy(update={"cache_url": private_redis.url})}
    )
    queue, cache = Redis.from_url(settings.redis.url), Redis.from_url(private_redis.url)
    with own_store(settings) as store:
        index_photos(store, settings, tmp_path / "photos", 8)
        with serving(settings, store) as api:
            assert search(api.url, "a lighthouse at dusk")[1]["cached"] is False
            assert search(api.url, "a lighthouse at dusk")[1]["cached"] is True
            key = cache_key(settings.redis.prefix, 1, normalize_query("a lighthouse at dusk"))
            assert cache.exists(key) == 1 and queue.exists(key) == 0

            private_redis.stop()
            status, body = search(api.url, "a lighthouse at dusk")
            assert status == 200 and body["cached"] is False
            # Job records live in the queue's Redis, which is still up.
            jobs = httpx.get(api.url + "/v1/admin/jobs", headers={"X-API-Key": ADMIN_KEY})
            assert jobs.status_code == 200, jobs.text
            ready = httpx.get(api.url + "/readyz").json()
            assert ready["status"] == "degraded" and ready["checks"]["redis"]["ok"] is False


def test_triton_stopped_cached_queries_answer_others_503_then_recovery(
    repository: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ports = triton_ports()
    triton = TritonServer(repository, ports, tmp_path_factory.mktemp("triton-faults"))
    settings = api_settings(tmp_path / "data", triton.url, repository, embed_timeout_s=1.0)
    with triton, own_store(settings) as store:
        index_photos(store, settings, tmp_path / "photos", 8)
        with serving(settings, store) as api:
            assert search(api.url, "lighthouse at dawn")[0] == 200
            triton.stop()

            status, body = search(api.url, "lighthouse at dawn")
            assert status == 200 and body["cached"] is True and len(body["results"]) == 5
            status, body = search(api.url, "a red tram")  # at the 1 s deadline, not a hang
            assert status == 503, body
            assert body["error"] == "triton_unavailable" and "embedding model" in body["message"]
            assert body["_headers"]["retry-after"] == str(settings.api.retry_after_s)
            ready = httpx.get(api.url + "/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["triton"]["ok"] is False
            # Similar search needs no model: it still answers from the stored vectors.
            assert httpx.get(api.url + "/v1/photos/photo001.jpg/similar", headers=SEARCH).is_success

            triton.start()

            def answers_again() -> bool:
                status, body = search(api.url, "a red tram")
                assert status in (200, 503), body
                return status == 200

            wait_until(answers_again, 120, "an uncached search answering after Triton's return")
            assert search(api.url, "a red tram")[1]["cached"] is True
            assert httpx.get(api.url + "/readyz").status_code == 200


def test_vector_store_unreachable_is_a_503_and_readyz_names_it(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    """qdrant-client against a server address where nothing listens: the server is down."""
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    settings = api_settings(tmp_path / "data", triton.url, repository)
    settings.qdrant.url = dead
    settings.qdrant.timeout_s = 1
    with serving(settings) as api:
        status, body = search(api.url, "a lighthouse")
        assert status == 503, body
        assert body["error"] == "vector_store_unavailable"
        assert body["_headers"]["retry-after"] == str(settings.api.retry_after_s)
        ready = httpx.get(api.url + "/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["vector_store"]["ok"] is False
        assert metric(api.metrics_url, "photosearch_vector_store_errors_total") >= 1
