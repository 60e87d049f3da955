"""`photosearch judgements from-clicks`, `photosearch analytics` and `photosearch feedback
popularity` on a log in the session's Redis: the hand-counted log of tests/unit/core/feedback,
as the API would have kept it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from typer.testing import CliRunner

from core.feedback.analytics import analyse
from core.feedback.clickmodel import query_id
from core.feedback.events import events_key
from core.feedback.popularity import Popularity
from core.feedback.searchlog import record_search
from core.quality.judgements import load_judgements
from core.settings import get_settings
from photosearch.cli import app
from photosearch.feedback_cli import report
from tests.unit.core.feedback.conftest import EVENTS, RECORDS

DAY = 86400


@pytest.fixture
def prefix(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", name)
    get_settings.cache_clear()
    yield name
    get_settings.cache_clear()


async def log_at(redis_url: str, prefix: str, at: float, tag: str = "0") -> None:
    """The recorded log, as searched and clicked at `at`; `tag` ends its search ids."""
    client = AsyncRedis.from_url(redis_url)
    try:
        for record in RECORDS:
            await record_search(
                client,
                prefix,
                record.model_copy(update={"at": at, "search_id": record.search_id[:-1] + tag}),
                40 * DAY,
            )
        for event in EVENTS:
            stored = event.model_copy(update={"at": at, "search_id": event.search_id[:-1] + tag})
            await client.xadd(events_key(prefix), {"event": stored.model_dump_json()})
    finally:
        await client.aclose()


def hours_ago(redis: Redis, hours: float) -> float:
    """A time that long before now by Redis's clock (the tests keep none of their own)."""
    seconds, _ = redis.time()
    return float(seconds) - hours * 3600


@pytest.fixture
async def logged(prefix: str, redis: Redis, redis_url: str) -> str:
    """The recorded log, searched and clicked an hour ago."""
    await log_at(redis_url, prefix, hours_ago(redis, 1))
    return prefix


def test_from_clicks_writes_the_click_models_set(logged: str, tmp_path: Path) -> None:
    out = tmp_path / "from-clicks"
    answer = CliRunner().invoke(app, ["judgements", "from-clicks", "--out", str(out)])
    assert answer.exit_code == 0, answer.output
    assert "1 queries, 4 judgements (2 graded 2, 2 graded 1) from 14 searches" in answer.output
    made = load_judgements(out)
    assert dict(made.grades(query_id("red car"))) == {"a": 2, "b": 1, "c": 2, "d": 1}
    fewer = CliRunner().invoke(
        app, ["judgements", "from-clicks", "--out", str(out), "--min-sessions", "2"]
    )
    assert fewer.exit_code == 0, fewer.output
    assert [q.text for q in load_judgements(out).queries] == ["red car", "blue boat"]


def test_from_clicks_with_nothing_to_grade_writes_nothing(prefix: str, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    answer = CliRunner().invoke(app, ["judgements", "from-clicks", "--out", str(out)])
    assert answer.exit_code == 1
    assert "nothing written" in answer.output
    assert not out.exists()


def test_analytics_counts_as_the_hand_count(logged: str) -> None:
    answer = CliRunner().invoke(app, ["analytics", "--days", "1", "--json"])
    assert answer.exit_code == 0, answer.output
    figures = json.loads(answer.output)
    assert (figures["searches"], figures["zero_result_searches"]) == (14, 3)
    assert figures["zero_result"] == [{"query": "unicorn", "searches": 3}]
    assert figures["no_click"] == [{"query": "red car", "searches": 3}]
    text = CliRunner().invoke(app, ["analytics"])
    assert text.exit_code == 0, text.output
    assert "14 searches (13 by text) in 3 sessions; 7 with a click" in text.output
    assert "     3  unicorn" in text.output


async def test_analytics_reads_only_the_days_asked_within_the_retention(
    prefix: str, redis: Redis, redis_url: str
) -> None:
    await log_at(redis_url, prefix, hours_ago(redis, 24 * 31), "1")  # past the 30 days kept
    await log_at(redis_url, prefix, hours_ago(redis, 48), "2")
    for days, searches in [(1, 0), (3, 14), (40, 14)]:
        answer = CliRunner().invoke(app, ["analytics", "--days", str(days), "--json"])
        assert answer.exit_code == 0, answer.output
        assert json.loads(answer.output)["searches"] == searches, days


def test_the_report_of_an_empty_log_says_so() -> None:
    text = report(analyse([], []), 7)
    assert "the last 7 days: 0 searches (0 by text) in 0 sessions; 0 with a click" in text
    assert "events: none" in text


async def test_feedback_popularity_keeps_each_photos_value_and_marks_the_changed(
    prefix: str, redis: Redis, redis_url: str
) -> None:
    await log_at(redis_url, prefix, hours_ago(redis, 48), "2")
    popularity = Popularity(redis, prefix)
    answer = CliRunner().invoke(app, ["feedback", "popularity"])
    assert answer.exit_code == 0, answer.output
    assert "5 photos with events in the last 30 days (12 events; opened 1, downloaded 5)" in (
        answer.output
    )
    assert "5 changed" in answer.output
    assert popularity.lookup(["a", "b", "c", "d", "e", "y"]) == {
        "a": 6.0,
        "b": 2.0,
        "c": 2.0,
        "d": 1.0,
        "y": 2.0,
    }
    assert popularity.take_pending() == ["a", "b", "c", "d", "y"]
    # The events of the last day are none: every photo's value drops to 0.
    quiet = CliRunner().invoke(app, ["feedback", "popularity", "--since", "1"])
    assert quiet.exit_code == 0, quiet.output
    assert "0 photos with events in the last 1 days (0 events" in quiet.output
    assert popularity.lookup(["a"]) == {"a": 0.0}
    assert popularity.take_pending() == ["a", "b", "c", "d", "y"]
