"""Every search's answer carries a search id, and the search log keeps what it showed, with
the caller's session id and nothing else of the caller's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from core.feedback.searchlog import SearchRecord, record_key
from core.settings import Settings
from core.vectorstore import VectorStore
from query_api.http.auth import Caller
from query_api.routes import photos, search
from query_api.search.feedback import SESSION_HEADER, EventBound
from query_api.services import Services
from tests.unit.query_api.conftest import LIVE, api_settings, result_ids, router_app

SESSION = "0f8e6c1a-5b2d-4c3e-9a7f-1d2e3f4a5b6c"


def on_redis(settings: Settings, redis_url: str) -> Settings:
    """The settings with the session's Redis as the persistent one (the log's)."""
    redis = settings.redis.model_copy(update={"url": redis_url})
    return settings.model_copy(update={"redis": redis})


@pytest.fixture(scope="module")
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[TestClient]:
    settings = on_redis(api_settings(tmp_path_factory.mktemp("api")), redis_url)
    app = router_app(settings, shared_store, search.router, photos.router)
    with TestClient(app) as test_client:
        yield test_client


def logged(client: TestClient, redis: Redis, search_id: str) -> SearchRecord:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    data = redis.get(record_key(services.settings.redis.prefix, search_id))
    assert isinstance(data, bytes), f"no record of {search_id}"
    return SearchRecord.model_validate_json(data)


def test_a_text_search_is_logged_with_its_normalized_query_ranks_and_session(
    client: TestClient, redis: Redis
) -> None:
    answer = client.get(
        "/v1/search",
        params={"q": "  Cat ", "mode": "keyword", "offset": 0},
        headers={SESSION_HEADER: SESSION, "User-Agent": "an agent", "X-API-Key": ""},
    )
    assert answer.status_code == 200
    body = answer.json()
    record = logged(client, redis, body["search_id"])
    assert (record.kind, record.query, record.mode) == ("text", "cat", "keyword")
    assert (record.collection, record.model_version) == (LIVE, 1)
    assert record.shown == result_ids(body) and record.shown
    assert record.session == SESSION
    # Nothing else of the caller: no address, no key, no agent.
    assert "testclient" not in record.model_dump_json()
    assert "an agent" not in record.model_dump_json()


def test_a_zero_result_search_is_logged_with_nothing_shown(
    client: TestClient, redis: Redis
) -> None:
    answer = client.post("/v1/search", json={"q": "zebra", "mode": "keyword"})
    assert answer.status_code == 200
    record = logged(client, redis, answer.json()["search_id"])
    assert (record.shown, record.session, record.query) == ([], None, "zebra")


def test_each_answer_has_its_own_search_id_and_the_others_are_logged_with_no_query(
    client: TestClient, redis: Redis
) -> None:
    first = client.get("/v1/photos/cat-1/similar", params={"limit": 2, "offset": 1})
    second = client.get("/v1/photos/cat-1/similar", params={"limit": 2, "offset": 1})
    recommended = client.get("/v1/search/recommend", params={"positive": "cat-1"})
    ids = {a.json()["search_id"] for a in (first, second, recommended)}
    assert len(ids) == 3
    similar = logged(client, redis, first.json()["search_id"])
    assert (similar.kind, similar.query, similar.offset) == ("similar", None, 1)
    assert similar.rank_of(similar.shown[0]) == 2
    assert logged(client, redis, recommended.json()["search_id"]).kind == "recommend"


@pytest.mark.parametrize("session", ["short", "has spaces in it, sixteen+", "x" * 65])
def test_a_session_id_not_of_the_random_form_is_refused(client: TestClient, session: str) -> None:
    answer = client.get(
        "/v1/search", params={"q": "cat", "mode": "keyword"}, headers={"X-Session-Id": session}
    )
    assert answer.status_code == 422
    assert "x-session-id" in answer.text.lower()


def test_a_search_goes_on_when_the_log_cannot_be_written(client: TestClient) -> None:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    guard = services.searchlog.guard
    down = guard.retry_s
    guard.retry_s = 3600.0
    asyncio.run(guard.call("test", _failing()))
    try:
        answer = client.get("/v1/search", params={"q": "cat", "mode": "keyword"})
        assert answer.status_code == 200
        assert answer.json()["search_id"]
    finally:
        guard.retry_s = down
        guard._down_until = 0.0


async def _failing() -> None:
    raise OSError("Redis is gone")


def test_an_event_bucket_is_the_keys_or_a_hash_that_never_holds_the_address(
    client: TestClient,
) -> None:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    bound = EventBound(services.limits.buckets, 60, "salt")
    anonymous = services.keys.identify(None)
    assert anonymous is not None
    first = bound.bucket(anonymous, "203.0.113.7")
    assert "203.0.113" not in first and first.startswith("events:addr:")
    assert bound.bucket(anonymous, "203.0.113.7") == first != bound.bucket(anonymous, "203.0.113.8")
    assert (
        bound.bucket(Caller("photostock", frozenset({"search"})), None) == "events:key:photostock"
    )
