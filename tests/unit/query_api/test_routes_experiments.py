"""The experiment's admin routes over the in-process store and the session's Redis: start one
against an existing collection, read it, end it with a decision that the reindex reads; the
refusals name what to do; only for an admin key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.experiments import credit, decision_for
from core.jobstatus import JobKind, JobState
from core.vectorstore import VectorStore, collection_name
from query_api.routes import experiments
from query_api.services import Services
from tests.unit.query_api.conftest import DIM, LIVE, api_settings, key_of, router_app
from tests.unit.query_api.search.test_feedback import on_redis

ADMIN = {"X-API-Key": "admin-secret"}
READER = {"X-API-Key": "reader-secret"}
CANDIDATE = collection_name(1, "cand")


@pytest.fixture
def client(own_store: VectorStore, tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    own_store.create_collection(CANDIDATE, DIM)
    keys = [key_of("ops", "admin-secret", "admin"), key_of("page", "reader-secret", "search")]
    settings = on_redis(api_settings(tmp_path, keys=keys), redis_url)
    with TestClient(router_app(settings, own_store, experiments.router)) as test_client:
        yield test_client


def _services(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def test_an_experiment_starts_reads_and_ends_as_the_admin_decides(client: TestClient) -> None:
    assert client.get("/v1/admin/experiments/current", headers=ADMIN).status_code == 404
    started = client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": CANDIDATE})
    assert started.status_code == 201, started.text
    body = started.json()
    assert (body["live"], body["candidate"], body["state"]) == (LIVE, CANDIDATE, "running")
    assert body["share"] == 0.05  # PHOTOSEARCH_API__EXPERIMENT_SHARE's default
    assert (body["impressions"], body["p_value"], body["winner"]) == (0, 1.0, None)

    again = client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": CANDIDATE})
    assert again.status_code == 409
    assert "is running: end it first" in again.json()["message"]

    services = _services(client)
    redis, prefix = services.jobs.redis, services.settings.redis.prefix
    for n in range(10):  # ten searches whose clicks went to the candidate's results
        credit(redis, prefix, body["id"], f"s{n}", "cat-1", "candidate")
    status = client.get("/v1/admin/experiments/current", headers=ADMIN).json()
    assert (status["impressions"], status["wins"], status["losses"]) == (10, 10, 0)
    assert status["p_value"] == pytest.approx(2 / 1024)
    assert (status["significant"], status["winner"]) == (True, "candidate")

    ended = client.post(
        "/v1/admin/experiments/current/end", headers=ADMIN, json={"decision": "switch"}
    )
    assert ended.status_code == 200, ended.text
    assert (ended.json()["state"], ended.json()["ended_by"]) == ("switch", "admin")
    assert decision_for(redis, prefix, CANDIDATE) == "switch"
    other = client.post(
        "/v1/admin/experiments/current/end", headers=ADMIN, json={"decision": "drop"}
    )
    assert other.status_code == 409
    assert "ended already, with switch" in other.json()["message"]


def test_a_switch_against_a_significant_live_win_needs_force(client: TestClient) -> None:
    started = client.post(
        "/v1/admin/experiments", headers=ADMIN, json={"candidate": CANDIDATE, "share": 0.5}
    ).json()
    assert started["share"] == 0.5
    services = _services(client)
    redis, prefix = services.jobs.redis, services.settings.redis.prefix
    for n in range(10):
        credit(redis, prefix, started["id"], f"s{n}", "cat-1", "live")
    end = "/v1/admin/experiments/current/end"
    refused = client.post(end, headers=ADMIN, json={"decision": "switch"})
    assert refused.status_code == 409
    assert "live collection wins significantly (10 to 0" in refused.json()["message"]
    assert decision_for(redis, prefix, CANDIDATE) == "running"
    forced = client.post(end, headers=ADMIN, json={"decision": "switch", "force": True})
    assert (forced.status_code, forced.json()["reason"]) == (200, "forced")
    assert decision_for(redis, prefix, CANDIDATE) == "switch"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"candidate": "photos-m1-nope"}, 404, "no collection 'photos-m1-nope'"),
        ({"candidate": LIVE}, 422, "is the live collection"),
        ({"candidate": CANDIDATE, "share": 0}, 422, "share"),
        ({"candidate": CANDIDATE, "share": 1.5}, 422, "share"),
        ({"candidate": CANDIDATE, "extra": 1}, 422, "extra"),
    ],
)
def test_a_bad_start_is_refused_with_a_message(
    client: TestClient, body: dict[str, object], status: int, message: str
) -> None:
    answer = client.post("/v1/admin/experiments", headers=ADMIN, json=body)
    assert answer.status_code == status
    assert message in answer.text


def test_a_running_reindex_s_collection_may_be_named_before_it_exists(
    client: TestClient,
) -> None:
    services = _services(client)
    jobs = services.jobs
    job_id = jobs.create(JobKind.REINDEX, state=JobState.QUEUED, model_version=1)
    planned = collection_name(1, job_id)
    started = client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": planned})
    assert started.status_code == 201, started.text
    prefix = services.settings.redis.prefix
    assert decision_for(jobs.redis, prefix, planned) == "running"
    jobs.finish(job_id, JobState.CANCELLED)  # no longer building it: refused
    client.post("/v1/admin/experiments/current/end", headers=ADMIN, json={"decision": "drop"})
    refused = client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": planned})
    assert refused.status_code == 404
    assert "nor a reindex running that builds it" in refused.json()["message"]


def test_a_candidate_of_a_model_version_not_exported_is_refused(
    client: TestClient, own_store: VectorStore
) -> None:
    unexported = collection_name(7, "x")
    own_store.create_collection(unexported, DIM)
    answer = client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": unexported})
    assert answer.status_code == 422
    assert "model version 7" in answer.json()["message"]


def test_a_bad_decision_is_refused_and_a_search_key_is_forbidden(client: TestClient) -> None:
    client.post("/v1/admin/experiments", headers=ADMIN, json={"candidate": CANDIDATE})
    end = "/v1/admin/experiments/current/end"
    answer = client.post(end, headers=ADMIN, json={"decision": "maybe"})
    assert answer.status_code == 422
    assert "decision" in answer.text
    assert client.get("/v1/admin/experiments/current", headers=READER).status_code == 403
    assert client.post(end, headers=READER, json={"decision": "drop"}).status_code == 403
