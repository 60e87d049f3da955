"""Events checked against the search they name, kept in a stream, and gone past the retention
by the clock the writer passes."""

from __future__ import annotations

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from core.feedback.events import (
    BadEvent,
    Event,
    check,
    events_key,
    no_credit,
    read_events,
    store_events,
)
from core.feedback.searchlog import SearchRecord, new_search_id

DAY = 86400
SESSION = "a" * 16


def a_search(session: str | None = SESSION) -> SearchRecord:
    return SearchRecord(
        search_id=new_search_id(),
        query="a cat",
        collection="photos-m1-a",
        model_version=1,
        shown=["p1", "p2", "p3"],
        offset=10,
        session=session,
        at=1000.0,
    )


def opened(record: SearchRecord, photo_id: str, rank: int) -> Event:
    return Event(search_id=record.search_id, photo_id=photo_id, rank=rank, action="opened")


def test_events_on_what_a_search_showed_at_its_ranks_pass() -> None:
    record = a_search()
    check([opened(record, "p1", 11), opened(record, "p3", 13)], SESSION, {record.search_id: record})
    anonymous = a_search(session=None)
    check([opened(anonymous, "p2", 12)], None, {anonymous.search_id: anonymous})


@pytest.mark.parametrize(
    ("photo_id", "rank", "session", "message"),
    [
        ("p9", 11, SESSION, "did not show the photo 'p9'"),
        ("p2", 2, SESSION, "showed 'p2' at rank 12, not 2"),
        ("p2", 12, "b" * 16, "was made in another session"),
    ],
)
def test_a_bad_event_is_named_by_its_index(
    photo_id: str, rank: int, session: str, message: str
) -> None:
    record, anonymous = a_search(), a_search(session=None)
    events = [opened(anonymous, "p1", 11), opened(record, photo_id, rank)]
    searches = {record.search_id: record, anonymous.search_id: anonymous}
    with pytest.raises(BadEvent, match=r"^events\[1\]: .*" + message) as raised:
        check(events, session, searches)
    assert raised.value.index == 1


def test_an_event_on_a_search_not_kept_is_refused() -> None:
    record = a_search()
    with pytest.raises(BadEvent, match=r"events\[0\]: no search .* past the retention"):
        check([opened(record, "p1", 11)], SESSION, {})


async def test_events_are_kept_with_their_session_and_read_back_in_order(
    aredis: AsyncRedis, redis: Redis, prefix: str
) -> None:
    record = a_search()
    events = [opened(record, "p1", 11), opened(record, "p2", 12)]
    await store_events(aredis, prefix, events, SESSION, now=1_000_000.0, retention_s=DAY)
    read = list(read_events(redis, prefix, since=0, now=1_000_000.0, retention_s=DAY, chunk=1))
    assert [(e.photo_id, e.rank, e.session, e.at) for e in read] == [
        ("p1", 11, SESSION, 1_000_000.0),
        ("p2", 12, SESSION, 1_000_000.0),
    ]


async def test_events_past_the_retention_expire_by_the_given_clock(
    aredis: AsyncRedis, redis: Redis, prefix: str
) -> None:
    record = a_search()
    start = 1_000_000.0
    await store_events(aredis, prefix, [opened(record, "p1", 11)], None, now=start, retention_s=DAY)
    assert len(list(read_events(redis, prefix, since=0, now=start + DAY, retention_s=DAY))) == 1
    # A day and a second on: no reader sees it any more...
    assert not list(read_events(redis, prefix, since=0, now=start + DAY + 1, retention_s=DAY))
    # ...and the next event written trims it from Redis.
    later = start + DAY + 1
    await store_events(aredis, prefix, [opened(record, "p2", 12)], None, now=later, retention_s=DAY)
    assert redis.xlen(events_key(prefix)) == 1
    (kept,) = read_events(redis, prefix, since=0, now=later, retention_s=DAY)
    assert kept.photo_id == "p2"


async def test_without_an_experiment_nothing_is_credited() -> None:
    record = a_search()
    await no_credit(record, [opened(record, "p1", 11)])
