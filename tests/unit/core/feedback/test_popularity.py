"""Each photo's popularity from the events (opens + 5 x downloads), and the values the indexer
joins, kept in the session's Redis: what changed, and the photos an increment is to plan."""

from __future__ import annotations

import uuid

import pytest
from redis import Redis

from core.feedback.events import events_key
from core.feedback.popularity import WEIGHTS, Popularity, popularity_of, refresh
from tests.unit.core.feedback.conftest import EVENTS


@pytest.fixture
def popularity(redis: Redis) -> Popularity:
    return Popularity(redis, f"test-{uuid.uuid4().hex}")


def test_popularity_counts_opens_once_and_downloads_five_times() -> None:
    assert WEIGHTS == {"opened": 1.0, "downloaded": 5.0}
    # a: opened and downloaded; b, c, y: opened twice; d: opened once, skipped twice; e: skipped.
    assert popularity_of(EVENTS) == {"a": 6.0, "b": 2.0, "c": 2.0, "d": 1.0, "y": 2.0}
    assert popularity_of([]) == {}


def test_replace_reports_what_changed_and_keeps_a_zero_for_a_photo_gone_quiet(
    popularity: Popularity,
) -> None:
    assert popularity.replace({"a": 6.0, "b": 2.0}) == ["a", "b"]
    assert popularity.replace({"a": 6.0, "c": 1.0}) == ["b", "c"]
    assert popularity.lookup(["a", "b", "c", "d"]) == {"a": 6.0, "b": 0.0, "c": 1.0}
    assert popularity.lookup([]) == {}
    assert popularity.replace({"a": 6.0, "c": 1.0}) == []


def test_the_pending_photos_are_taken_once(popularity: Popularity) -> None:
    popularity.mark_pending(["b", "c"])
    popularity.mark_pending(["c"])
    popularity.mark_pending([])
    assert popularity.take_pending() == ["b", "c"]
    assert popularity.take_pending() == []


def test_a_refresh_counts_the_kept_events_and_marks_what_changed(
    popularity: Popularity, redis: Redis
) -> None:
    prefix = popularity.prefix
    for n, event in enumerate(EVENTS):  # kept as the API keeps them: ids at their time
        entry = {"event": event.model_dump_json()}
        redis.xadd(events_key(prefix), entry, id=f"{int(event.at * 1000)}-{n + 1}")  # type: ignore[arg-type]
    done = refresh(redis, prefix, since=0.0, now=2000.0, retention_s=3600)
    assert (done.events, done.photos) == (len(EVENTS), 5)
    assert done.changed == ["a", "b", "c", "d", "y"]
    assert popularity.take_pending() == done.changed
    # Past the retention the events count nothing: every value drops to 0, and is marked.
    later = refresh(redis, prefix, since=0.0, now=1000.0 + 7200, retention_s=3600)
    assert (later.events, later.photos, later.changed) == (0, 0, done.changed)
    assert popularity.lookup(["a"]) == {"a": 0.0}
