"""Popular queries for suggestions on the session's Redis: counted in the search log's own
write, readable only once several sessions searched them, gone within the retention by the
clock the caller passes, and bounded."""

from __future__ import annotations

from redis.asyncio import Redis as AsyncRedis

from core.feedback.searchlog import SearchRecord, new_search_id, record_search
from core.feedback.suggestlog import (
    PopularQuery,
    counted,
    period_s,
    queries_key,
    read_popular,
    sessions_key,
    trim,
)

DAY = 86400
RETENTION_S = 30 * DAY
# The middle of a period: the period before it is read too.
T0 = 1000 * period_s(RETENTION_S) + DAY


def a_search(
    query: str | None,
    session: str | None,
    at: float = T0,
    *,
    offset: int = 0,
    shown: tuple[str, ...] = ("p1",),
    kind: str = "text",
) -> SearchRecord:
    return SearchRecord.model_validate(
        {
            "search_id": new_search_id(),
            "kind": kind,
            "query": query,
            "collection": "photos-m1-a",
            "model_version": 1,
            "shown": list(shown),
            "offset": offset,
            "session": session,
            "at": at,
        }
    )


def session(n: int) -> str:
    return f"session-{n:08d}"


async def searched(aredis: AsyncRedis, prefix: str, *records: SearchRecord) -> None:
    for record in records:
        await record_search(aredis, prefix, record, RETENTION_S)


async def popular(aredis: AsyncRedis, prefix: str, now: float = T0) -> list[PopularQuery]:
    return await read_popular(
        aredis, prefix, now=now, retention_s=RETENTION_S, limit=100, min_sessions=3
    )


def test_only_a_first_page_of_a_text_query_that_showed_something_from_a_session_counts() -> None:
    assert counted(a_search("red car", session(1)))
    assert not counted(a_search("red car", None))  # sessions could not be told apart
    assert not counted(a_search("red car", session(1), offset=20))  # the same search, paged
    assert not counted(a_search("red car", session(1), shown=()))  # nothing to suggest
    assert not counted(a_search(None, session(1), kind="image"))
    assert not counted(a_search("x" * 101, session(1)))  # no search box holds it


async def test_a_query_one_session_searched_many_times_is_never_popular(
    aredis: AsyncRedis, prefix: str
) -> None:
    await searched(aredis, prefix, *[a_search("my neighbour's house", session(1))] * 20)
    await searched(aredis, prefix, *[a_search("my neighbour's house", None)] * 20)
    await searched(aredis, prefix, a_search("my neighbour's house", session(2)))
    assert await popular(aredis, prefix) == []


async def test_a_query_three_sessions_searched_is_popular_ranked_by_sessions_then_searches(
    aredis: AsyncRedis, prefix: str
) -> None:
    await searched(aredis, prefix, *[a_search("red car", session(n)) for n in range(3)])
    await searched(aredis, prefix, *[a_search("blue boat", session(n)) for n in range(4)])
    await searched(aredis, prefix, *[a_search("dog", session(n % 3)) for n in range(9)])
    assert await popular(aredis, prefix) == [
        PopularQuery("blue boat", 4, 4),
        PopularQuery("dog", 3, 9),
        PopularQuery("red car", 3, 3),
    ]


async def test_the_counts_are_written_with_the_record_and_expire_within_the_retention(
    aredis: AsyncRedis, prefix: str
) -> None:
    await searched(aredis, prefix, a_search("red car", session(1)))
    period = int(T0 // period_s(RETENTION_S))
    for key in (queries_key(prefix, period), sessions_key(prefix, period, "red car")):
        ttl = await aredis.ttl(key)
        assert 0 < ttl <= RETENTION_S


async def test_the_previous_period_is_read_and_the_one_before_is_not(
    aredis: AsyncRedis, prefix: str
) -> None:
    half = period_s(RETENTION_S)
    await searched(aredis, prefix, *[a_search("red car", session(n), T0 - half) for n in range(3)])
    await searched(aredis, prefix, *[a_search("old", session(n), T0 - 2 * half) for n in range(3)])
    # One more session in this period: its sessions are the larger count, never a sum.
    await searched(aredis, prefix, a_search("red car", session(9)))
    assert await popular(aredis, prefix) == [PopularQuery("red car", 3, 4)]
    assert await popular(aredis, prefix, now=T0 + half) == []


async def test_trimming_keeps_the_most_searched_and_drops_the_others_sessions(
    aredis: AsyncRedis, prefix: str
) -> None:
    for n in range(5):  # "q0" searched once ... "q4" five times, each by other sessions
        await searched(aredis, prefix, *[a_search(f"q{n}", session(s)) for s in range(n + 1)])
    assert await trim(aredis, prefix, now=T0, retention_s=RETENTION_S, keep=3) == 0  # 5 <= 6
    assert await trim(aredis, prefix, now=T0, retention_s=RETENTION_S, keep=2) == 3
    period = int(T0 // period_s(RETENTION_S))
    kept = await aredis.zrange(queries_key(prefix, period), 0, -1)
    assert kept == [b"q3", b"q4"]
    assert not await aredis.exists(sessions_key(prefix, period, "q2"))
    assert [q.text for q in await popular(aredis, prefix)] == ["q4", "q3"]
