"""The search log on the session's Redis: a record kept and read back, by id and in order,
and gone past the retention by the clock the caller passes."""

from __future__ import annotations

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from core.feedback.searchlog import (
    SearchLog,
    SearchRecord,
    load_search,
    new_search_id,
    read_searches,
    record_key,
    record_search,
    searches_key,
)
from core.redisguard import RedisGuard

DAY = 86400


def a_search(
    at: float, query: str = "a cat", shown: tuple[str, ...] = ("p1", "p2")
) -> SearchRecord:
    return SearchRecord(
        search_id=new_search_id(),
        query=query,
        mode="hybrid",
        collection="photos-m1-a",
        model_version=1,
        shown=list(shown),
        offset=20,
        session="s" * 16,
        at=at,
    )


def test_search_ids_are_distinct_and_unguessable_in_length() -> None:
    ids = {new_search_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert {len(i) for i in ids} == {22}


def test_a_record_knows_the_rank_it_showed_each_photo_at_past_its_offset() -> None:
    record = a_search(1000.0)
    assert (record.rank_of("p1"), record.rank_of("p2"), record.rank_of("p3")) == (21, 22, None)


async def test_a_record_is_read_back_by_its_id_with_the_retention_as_its_ttl(
    aredis: AsyncRedis, redis: Redis, prefix: str
) -> None:
    record = a_search(1000.0)
    await record_search(aredis, prefix, record, 30 * DAY)
    assert await load_search(aredis, prefix, record.search_id) == record
    assert 29 * DAY < redis.ttl(record_key(prefix, record.search_id)) <= 30 * DAY
    assert await load_search(aredis, prefix, new_search_id()) is None


async def test_a_record_past_the_retention_by_the_given_clock_is_gone(
    aredis: AsyncRedis, prefix: str
) -> None:
    record = a_search(1000.0)
    await record_search(aredis, prefix, record, DAY)
    assert await load_search(aredis, prefix, record.search_id, now=1000.0 + DAY, ttl_s=DAY)
    late = await load_search(aredis, prefix, record.search_id, now=1001.0 + DAY, ttl_s=DAY)
    assert late is None


async def test_the_searches_are_read_in_order_from_a_time_on(
    aredis: AsyncRedis, redis: Redis, prefix: str
) -> None:
    now = 1_000_000.0
    records = [a_search(now - 30 + i, query=f"q{i}") for i in range(5)]
    for record in records:
        await record_search(aredis, prefix, record, DAY)
    read = list(read_searches(redis, prefix, since=now - 28, now=now, ttl_s=DAY, chunk=2))
    assert [r.query for r in read] == ["q2", "q3", "q4"]


async def test_a_record_made_past_the_retention_trims_the_older_ones_from_the_stream(
    aredis: AsyncRedis, redis: Redis, prefix: str
) -> None:
    now = 1_000_000.0
    await record_search(aredis, prefix, a_search(now), DAY)
    assert redis.xlen(searches_key(prefix)) == 1
    await record_search(aredis, prefix, a_search(now + DAY + 60), DAY)
    assert redis.xlen(searches_key(prefix)) == 1


async def test_the_log_loses_a_record_when_redis_fails_but_never_raises(prefix: str) -> None:
    dead = AsyncRedis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    errors: list[str] = []
    log = SearchLog(dead, prefix, retention_s=DAY, guard=RedisGuard(5, 60, errors.append))
    try:
        assert not await log.write(a_search(1000.0))
        assert errors and errors[0].startswith("searchlog:")
        assert not await log.write(a_search(1000.0))  # skipped while the guard backs off
        assert len(errors) == 1
    finally:
        await dead.aclose()
