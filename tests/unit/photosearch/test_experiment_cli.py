"""`photosearch experiment`: status with no experiment and of one running; end refuses a switch
against a significant live win unless forced, and records the decision; a Redis that is not
PhotoSearch's is refused; a Redis lost meanwhile is waited for."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from typer.testing import CliRunner

from core import experiments
from core.experiments import credit, decision_for, start
from core.jobs import Jobs
from core.jobstatus import JobKind, JobPhase, JobState
from core.settings import get_settings
from core.vectorstore import collection_name
from photosearch.experiment_cli import experiment_app
from tests.support.indexing import marked_prefix
from tests.support.reconnecting import failing_first, on_a_test_clock

LIVE, CANDIDATE = "photos-m1-live", "photos-m2-cand"


@pytest.fixture
def prefix(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The commands' settings under a prefix of this test's (marked_prefix)."""
    yield from marked_prefix(redis, monkeypatch)


def test_status_says_when_no_experiment_was_started(prefix: str) -> None:
    shown = CliRunner().invoke(experiment_app, ["status"])
    assert shown.exit_code == 0, shown.output
    assert "no experiment was started" in shown.output


def test_status_shows_the_counts_and_the_sign_test(redis: Redis, prefix: str) -> None:
    started = start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=0.05)
    for n in range(9):
        credit(redis, prefix, started.id, f"s{n}", "p", "candidate")
    credit(redis, prefix, started.id, "s9", "p", "live")
    credit(redis, prefix, started.id, "s10", "p", "live")
    credit(redis, prefix, started.id, "s10", "q", "candidate")
    shown = CliRunner().invoke(experiment_app, ["status"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == f"experiment {started.id}: running"
    assert f"live         {LIVE}" in lines and f"candidate    {CANDIDATE}" in lines
    assert "share        5.00% of text searches (first pages)" in lines
    assert "impressions  11 (searches with a click)" in lines
    assert "wins 9, losses 1, ties 1 (for the candidate)" in lines
    # 9 to 1: p = 2 x 11 / 1024.
    assert (
        "sign test    p = 0.02148: significant at alpha 0.05: the candidate collection wins"
        in lines
    )
    as_json = CliRunner().invoke(experiment_app, ["status", "--json"])
    assert '"winner": "candidate"' in as_json.output


def test_status_rides_out_a_lost_redis_and_says_so(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=0.05)
    retries = on_a_test_clock(monkeypatch)
    lost = [RedisConnectionError("Connection refused.") for _ in range(2)]
    monkeypatch.setattr(experiments, "current", failing_first(experiments.current, lost))
    shown = CliRunner().invoke(experiment_app, ["status"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == f"experiment {started.id}: running"
    assert retries.waits == [0.5, 1.0]
    assert retries.said[0].startswith("lost Redis at ")
    assert retries.said[1:] == ["reconnected after 2 s"]


def test_a_switch_against_a_live_win_needs_force(redis: Redis, prefix: str) -> None:
    started = start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=0.05)
    for n in range(8):
        credit(redis, prefix, started.id, f"s{n}", "p", "live")
    refused = CliRunner().invoke(experiment_app, ["end", "--decision", "switch"])
    assert refused.exit_code == 1
    assert "live collection wins significantly (8 to 0" in refused.output
    assert decision_for(redis, prefix, CANDIDATE) == "running"
    forced = CliRunner().invoke(experiment_app, ["end", "--decision", "switch", "--force"])
    assert forced.exit_code == 0, forced.output
    assert decision_for(redis, prefix, CANDIDATE) == "switch"


def test_end_drops_as_told_and_refuses_a_second_decision(redis: Redis, prefix: str) -> None:
    start(redis, prefix, live=LIVE, candidate=CANDIDATE, share=0.05)
    dropped = CliRunner().invoke(experiment_app, ["end", "--decision", "drop"])
    assert dropped.exit_code == 0, dropped.output
    assert "ended: drop (by admin)" in dropped.output
    assert decision_for(redis, prefix, CANDIDATE) == "drop"
    again = CliRunner().invoke(experiment_app, ["end", "--decision", "switch"])
    assert again.exit_code == 1
    assert "ended already, with drop" in again.output
    bad = CliRunner().invoke(experiment_app, ["end", "--decision", "maybe"])
    assert bad.exit_code == 2


def test_a_redis_that_is_not_photosearchs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", f"unmarked-{uuid.uuid4().hex}")
    get_settings.cache_clear()
    try:
        shown = CliRunner().invoke(experiment_app, ["status"])
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert shown.exit_code == 2
    assert "is not PhotoSearch's" in shown.output


def test_status_says_when_the_candidate_s_reindex_has_not_caught_up(
    redis: Redis, prefix: str
) -> None:
    jobs = Jobs(redis, prefix)
    job_id = jobs.create(
        JobKind.REINDEX, state=JobState.RUNNING, phase=JobPhase.LOAD, model_version=2
    )
    start(redis, prefix, live=LIVE, candidate=collection_name(2, job_id), share=0.05)
    shown = CliRunner().invoke(experiment_app, ["status"])
    assert f"waiting      for reindex job {job_id} (load) to hold every photo" in shown.output
    jobs.update(job_id, phase=JobPhase.CATCH_UP)
    shown = CliRunner().invoke(experiment_app, ["status"])
    assert "waiting" not in shown.output
    jobs.finish(job_id, JobState.FAILED)
    shown = CliRunner().invoke(experiment_app, ["status", "--json"])
    assert f'"waiting_for": "{job_id}"' in shown.output
