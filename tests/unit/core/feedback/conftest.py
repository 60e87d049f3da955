"""A recorded search log, small enough to count by hand (test_clickmodel, test_analytics), and
an async client of the session's Redis with a key prefix of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis as AsyncRedis

from core.feedback.events import Action, StoredEvent
from core.feedback.searchlog import Kind, SearchRecord

SHOWN = ["a", "b", "c", "d", "e"]
S1, S2, S3 = "session-one-0001", "session-two-0002", "session-three-03"


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[AsyncRedis]:
    client = AsyncRedis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex}"


def search(
    name: str,
    session: str | None,
    query: str | None = "red car",
    shown: list[str] = SHOWN,
    offset: int = 0,
    kind: Kind = "text",
) -> SearchRecord:
    return SearchRecord(
        search_id=name.ljust(22, "0"),
        kind=kind,
        query=query,
        collection="photos-m1-a",
        model_version=1,
        shown=list(shown),
        offset=offset,
        session=session,
        at=1000.0,
    )


def events(name: str, *actions: tuple[str, Action]) -> list[StoredEvent]:
    record_id = name.ljust(22, "0")
    return [
        StoredEvent(
            search_id=record_id,
            photo_id=photo_id,
            rank=SHOWN.index(photo_id) + 1 if photo_id in SHOWN else 1,
            action=action,
            session=None,
            at=1000.0,
        )
        for photo_id, action in actions
    ]


RECORDS = [
    search("A", S1),
    search("B", S2),
    search("C", S3),
    search("D", S3),
    search("E", S1),
    search("F", S2),
    search("G", S1),
    search("H", S1, shown=[], offset=5),  # past the last page: not a zero-result query
    search("I", S1, query="blue boat", shown=["x", "y"]),
    search("J", S2, query="blue boat", shown=["y", "x"]),
    search("K", S3, query="unicorn", shown=[]),
    search("L", S1, query="unicorn", shown=[]),
    search("M", S2, query="unicorn", shown=[]),
    search("N", None, query=None, shown=["a", "b"], kind="image"),
]
EVENTS = [
    *events("A", ("c", "opened")),
    *events("B", ("a", "opened"), ("a", "downloaded")),
    *events("C", ("c", "opened"), ("b", "opened")),
    *events("E", ("d", "skipped"), ("e", "skipped")),
    *events("F", ("d", "opened")),
    *events("G", ("d", "skipped")),
    *events("I", ("y", "opened")),
    *events("J", ("y", "opened")),
    *events("N", ("b", "opened")),
]
