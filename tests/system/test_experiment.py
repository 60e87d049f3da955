"""An interleaved experiment end to end: the real API and Triton serving model versions 1 and
2, two collections of the same photos (the live one embedded by version 1, the candidate by
version 2), and a scripted searcher who opens only the candidate's results, which gives the
candidate a significant win; `photosearch experiment status` says so and `end` switches."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis
from typer.testing import CliRunner

from core.deployment import mark
from core.experiments import decision_for
from core.feedback.searchlog import SearchRecord, record_key
from core.settings import Settings, get_settings
from core.vectorstore import LIVE_ALIAS, model_version_of
from model.triton_server import TritonServer
from photosearch.experiment_cli import experiment_app
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    Served,
    api_settings,
    index_photos,
    metric,
    own_store,
    serving,
)
from tests.support.waiting import wait_until

ADMIN = {"X-API-Key": ADMIN_KEY}
QUERIES = (
    *("a photo", "a red object", "a landscape", "something blue", "a small thing"),
    *("a bright scene", "a dark scene", "a pattern", "an animal", "a building"),
    *("a face", "the sky"),
)


@pytest.fixture
def served(two_versions: tuple[Path, TritonServer], tmp_path: Path) -> Iterator[Served]:
    """The same 12 photos embedded by version 2 (the candidate) and by version 1 (live)."""
    repo, triton = two_versions
    settings = api_settings(tmp_path / "data", triton.url, repo)
    with own_store(settings) as store:
        candidate = index_photos(store, settings, tmp_path / "photos", 12, model_version=2)
        indexed = index_photos(store, settings, tmp_path / "photos", 12, model_version=1, tag="l")
        assert store.resolve(LIVE_ALIAS) == indexed.collection != candidate.collection
        with serving(settings, store) as server:
            yield Served(server, store, indexed)


def _record(redis: Redis, settings: Settings, search_id: str) -> SearchRecord:
    data = redis.get(record_key(settings.redis.prefix, search_id))
    assert isinstance(data, bytes), f"no record of the search {search_id}"
    return SearchRecord.model_validate_json(data)


@pytest.fixture
def clients(served: Served) -> Iterator[tuple[httpx.Client, httpx.Client, Redis]]:
    """An admin's client, a searcher's, and the test's Redis; all closed after."""
    url, settings = served.server.url, served.server.settings
    with (
        httpx.Client(base_url=url, headers=ADMIN, timeout=60) as admin,
        httpx.Client(base_url=url, headers={"X-API-Key": SEARCH_KEY}, timeout=60) as searcher,
    ):
        redis = Redis.from_url(settings.redis.url)
        try:
            yield admin, searcher, redis
        finally:
            redis.close()


def _candidate_of(served: Served) -> str:
    (name,) = [c.name for c in served.store.collections() if model_version_of(c.name) == 2]
    return name


def test_a_searcher_who_opens_the_candidates_results_gives_it_a_significant_win(
    served: Served,
    clients: tuple[httpx.Client, httpx.Client, Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, settings = served.server, served.server.settings
    admin, searcher, redis = clients
    candidate = _candidate_of(served)
    started = admin.post("/v1/admin/experiments", json={"candidate": candidate, "share": 1.0})
    assert started.status_code == 201, started.text
    assert (started.json()["live"], started.json()["candidate"]) == (
        served.indexed.collection,
        candidate,
    )
    session = uuid.uuid4().hex
    opened = 0
    for q in QUERIES:
        answer = searcher.get(
            "/v1/search",
            params={"q": q, "mode": "vector", "limit": 6, "collapse": "false"},
            headers={"X-Session-Id": session},
        )
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        record = _record(redis, settings, body["search_id"])
        assert record.sides is not None and len(record.sides) == len(body["results"]) == 6
        # Each side contributed its own model version's results, three each.
        for result, side in zip(body["results"], record.sides, strict=True):
            assert result["model_version"] == (2 if side == "candidate" else 1)
        assert record.sides.count("candidate") == 3
        events = [
            {"search_id": body["search_id"], "photo_id": r["id"], "rank": n + 1, "action": "opened"}
            for n, (r, side) in enumerate(zip(body["results"], record.sides, strict=True))
            if side == "candidate"
        ][:2]
        posted = searcher.post("/v1/events", json={"session": session, "events": events})
        assert posted.status_code == 202, posted.text
        opened += len(events)
        # The same events again (a retried request): counted once.
        again = searcher.post("/v1/events", json={"session": session, "events": events[:1]})
        assert again.status_code == 202, again.text

    status = admin.get("/v1/admin/experiments/current").json()
    n = len(QUERIES)
    assert (status["impressions"], status["wins"], status["losses"], status["ties"]) == (n, n, 0, 0)
    assert status["p_value"] == pytest.approx(2 / 2**n)
    assert status["p_value"] < settings.api.experiment_alpha
    assert (status["significant"], status["winner"]) == (True, "candidate")
    searched = metric(
        api.metrics_url, "photosearch_experiment_searches_total", outcome="interleaved"
    )
    assert searched == n
    credited = metric(api.metrics_url, "photosearch_experiment_credits_total", side="candidate")
    assert credited == opened

    # The command line reads the same record, and ends it with the admin's decision.
    mark(redis, settings.redis.prefix, "up")
    monkeypatch.setenv("PHOTOSEARCH_REDIS__URL", settings.redis.url)
    monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", settings.redis.prefix)
    get_settings.cache_clear()
    try:
        shown = CliRunner().invoke(experiment_app, ["status"])
        assert shown.exit_code == 0, shown.output
        assert f"wins {n}, losses 0, ties 0" in shown.output
        assert "significant at alpha 0.05: the candidate collection wins" in shown.output
        ended = CliRunner().invoke(experiment_app, ["end", "--decision", "switch"])
        assert ended.exit_code == 0, ended.output
        assert "ended: switch (by admin)" in ended.output
    finally:
        get_settings.cache_clear()
    assert decision_for(redis, settings.redis.prefix, candidate) == "switch"


def test_a_searcher_outside_the_share_and_later_pages_see_the_live_ranking_alone(
    served: Served, clients: tuple[httpx.Client, httpx.Client, Redis]
) -> None:
    settings = served.server.settings
    admin, search, redis = clients
    started = admin.post(
        "/v1/admin/experiments", json={"candidate": _candidate_of(served), "share": 1.0}
    )
    assert started.status_code == 201, started.text
    params: dict[str, str | int] = {"q": "a photo", "mode": "vector", "limit": 4, "offset": 4}
    later = search.get("/v1/search", params=params).json()
    assert {r["model_version"] for r in later["results"]} == {1}
    assert _record(redis, settings, later["search_id"]).sides is None
    keyword = search.get("/v1/search", params={"q": "photo", "mode": "keyword"}).json()
    assert _record(redis, settings, keyword["search_id"]).sides is None
    ended = admin.post("/v1/admin/experiments/current/end", json={"decision": "drop"})
    assert ended.status_code == 200, ended.text

    # A replica reads the experiment again within alias_cache_s: then it answers alone.
    def live_alone() -> bool:
        plain = search.get("/v1/search", params={"q": "a photo", "mode": "vector"}).json()
        return _record(redis, settings, plain["search_id"]).sides is None

    wait_until(live_alone, settings.api.alias_cache_s + 60, "a search answered by live alone")
