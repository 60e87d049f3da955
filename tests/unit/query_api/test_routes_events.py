"""POST /v1/events over the real search log: batched, checked against the search named,
bounded per caller apart from the search limits, kept without the caller's address."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from core.feedback.events import Event, events_key, read_events
from core.feedback.searchlog import SearchRecord
from core.settings import Settings
from core.vectorstore import VectorStore
from query_api.routes import events, search
from query_api.services import Services
from tests.unit.query_api.conftest import api_settings, router_app
from tests.unit.query_api.search.test_feedback import on_redis

SESSION = "5b2d4c3e-9a7f-4d2e-8f4a-5b6c0f8e6c1a"


def events_settings(settings: Settings, **api: Any) -> Settings:
    return settings.model_copy(update={"api": settings.api.model_copy(update=api)})


@pytest.fixture
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[TestClient]:
    """Five events a minute, three a request; two searches at once, hardly refilled."""
    settings = on_redis(api_settings(tmp_path_factory.mktemp("api")), redis_url)
    settings = events_settings(
        settings,
        events_per_minute=5,
        events_batch_max=3,
        anonymous_rate_per_s=0.001,
        anonymous_burst=2,
    )
    app = router_app(settings, shared_store, search.router, events.router)
    with TestClient(app) as test_client:
        yield test_client


def services_of(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def searched(client: TestClient, q: str = "cat") -> dict[str, Any]:
    answer = client.get(
        "/v1/search", params={"q": q, "mode": "keyword"}, headers={"X-Session-Id": SESSION}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def event(answer: dict[str, Any], index: int, action: str = "opened") -> dict[str, Any]:
    result = answer["results"][index]
    return {
        "search_id": answer["search_id"],
        "photo_id": result["id"],
        "rank": answer["offset"] + index + 1,
        "action": action,
    }


def post(client: TestClient, items: Sequence[dict[str, Any]], session: str | None = SESSION) -> Any:
    return client.post("/v1/events", json={"session": session, "events": list(items)})


def kept(client: TestClient, redis: Redis) -> list[Any]:
    services = services_of(client)
    log = services.searchlog
    now = log.now()
    return list(read_events(redis, log.prefix, since=0, now=now, retention_s=log.retention_s))


def test_a_batch_of_events_is_accepted_and_kept_without_the_callers_address(
    client: TestClient, redis: Redis
) -> None:
    answer = searched(client)
    assert len(answer["results"]) >= 2
    items = [event(answer, 1, "skipped"), event(answer, 0), event(answer, 0, "downloaded")]
    accepted = post(client, items)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json() == {"accepted": 3, "searches": 1}
    stored = kept(client, redis)
    assert [(e.photo_id, e.action, e.session) for e in stored] == [
        (i["photo_id"], i["action"], SESSION) for i in items
    ]
    raw = redis.xrange(events_key(services_of(client).searchlog.prefix))
    assert b"testclient" not in repr(raw).encode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rank": 7}, "events[1]: the search showed"),
        ({"photo_id": "boat-1"}, "events[1]: the search"),
        ({"search_id": "A" * 22}, "events[1]: no search 'AAAAAAAAAAAAAAAAAAAAAA'"),
        ({"action": "liked"}, "events.1.action"),
        ({"rank": 0}, "events.1.rank"),
    ],
)
def test_a_bad_event_is_a_422_naming_it_and_nothing_of_the_batch_is_kept(
    client: TestClient, redis: Redis, change: dict[str, Any], message: str
) -> None:
    answer = searched(client)
    refused = post(client, [event(answer, 0), {**event(answer, 0), **change}])
    assert refused.status_code == 422
    assert message in refused.json()["message"]
    assert kept(client, redis) == []


def test_a_batch_past_the_bound_or_empty_or_of_another_session_is_refused(
    client: TestClient,
) -> None:
    answer = searched(client)
    too_many = post(client, [event(answer, 0)] * 4)
    assert too_many.status_code == 422
    assert "at most 3 a request, not 4" in too_many.json()["message"]
    assert post(client, []).status_code == 422
    assert post(client, [event(answer, 0)], session="not a session").status_code == 422
    other = post(client, [event(answer, 0)], session="c" * 16)
    assert other.status_code == 422
    assert "another session" in other.json()["message"]


def test_events_past_a_callers_bound_are_a_429_and_never_charge_its_searches(
    client: TestClient,
) -> None:
    answer = searched(client)  # one of the two searches the burst allows
    assert post(client, [event(answer, 0)] * 3).status_code == 202
    assert post(client, [event(answer, 0)] * 2).status_code == 202
    refused = post(client, [event(answer, 0)])
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "too many events" in refused.json()["message"]
    # The six events spent nothing of the search limit: the second search is still allowed.
    searched(client)


def test_accepted_events_reach_the_experiments_credit_by_search(client: TestClient) -> None:
    credited: list[tuple[SearchRecord, list[Event]]] = []

    async def credit(record: SearchRecord, events: Sequence[Event]) -> None:
        credited.append((record, list(events)))

    services_of(client).credit = credit
    first, second = searched(client, "cat"), searched(client, "dog")
    accepted = post(client, [event(first, 0), event(second, 0), event(first, 1)])
    assert accepted.json() == {"accepted": 3, "searches": 2}
    assert [(r.search_id, [e.photo_id for e in es]) for r, es in credited] == [
        (first["search_id"], [first["results"][0]["id"], first["results"][1]["id"]]),
        (second["search_id"], [second["results"][0]["id"]]),
    ]
