"""What a searcher did with a search's results (opened, downloaded, skipped), checked against
the search log and kept in a Redis stream for the retention; no personal data, only the
per-session random id the caller chose to send.

The page sends `opened` and `downloaded`; skips are derived by the click model from the log
(the results shown above a click: core.feedback.clickmodel). A caller may still send `skipped`
for a result it knows was seen and passed over; the click model counts it as seen, unclicked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from core.feedback.searchlog import (
    SEARCH_ID_PATTERN,
    SESSION_PATTERN,
    SearchRecord,
    append,
    min_id,
)

Action = Literal["opened", "downloaded", "skipped"]
CLICKS: frozenset[str] = frozenset({"opened", "downloaded"})


class Event(BaseModel):
    """One action on one result of one search."""

    search_id: str = Field(pattern=SEARCH_ID_PATTERN, description="The search's `search_id`.")
    photo_id: str = Field(min_length=1, max_length=1024, description="The result acted on.")
    rank: int = Field(ge=1, description="Its rank in the search (1: the first result).")
    action: Action


class EventBatch(BaseModel):
    """What `POST /v1/events` takes: the caller's session and its events, in order."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session": "0f8e6c1a-5b2d-4c3e-9a7f-1d2e3f4a5b6c",
                    "events": [
                        {
                            "search_id": "Jq3vX0b2kS9yQm1Zt8wR4A",
                            "photo_id": "2024/06/red-bicycle.jpg",
                            "rank": 3,
                            "action": "opened",
                        }
                    ],
                }
            ]
        }
    )

    session: str | None = Field(
        None,
        pattern=SESSION_PATTERN,
        description="The per-session random id the searches were made with (X-Session-Id).",
    )
    events: list[Event] = Field(min_length=1)


class StoredEvent(BaseModel):
    """An event as the log keeps it: with its session and when it was accepted."""

    search_id: str
    photo_id: str
    rank: int
    action: Action
    session: str | None
    at: float


class BadEvent(ValueError):
    """An event that names no search kept, or a result that search did not show."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"events[{index}]: {message}")
        self.index = index


def check(events: Sequence[Event], session: str | None, searches: dict[str, SearchRecord]) -> None:
    """Raise BadEvent for the first event that does not match the search it names."""
    for index, event in enumerate(events):
        record = searches.get(event.search_id)
        if record is None:
            raise BadEvent(index, f"no search {event.search_id!r} (unknown, or past the retention)")
        if record.session is not None and record.session != session:
            raise BadEvent(index, f"the search {event.search_id!r} was made in another session")
        rank = record.rank_of(event.photo_id)
        if rank is None:
            raise BadEvent(
                index, f"the search {event.search_id!r} did not show the photo {event.photo_id!r}"
            )
        if rank != event.rank:
            raise BadEvent(
                index, f"the search showed {event.photo_id!r} at rank {rank}, not {event.rank}"
            )


def events_key(prefix: str) -> str:
    return f"{prefix}:feedback:events"


async def store_events(
    redis: AsyncRedis,
    prefix: str,
    events: Sequence[Event],
    session: str | None,
    *,
    now: float,
    retention_s: int,
) -> None:
    """Append the events to the stream in one round trip; each append trims what is past the
    retention (by `now`), so old events expire without a sweeper."""
    pipe = redis.pipeline(transaction=False)
    for event in events:
        stored = StoredEvent(**event.model_dump(), session=session, at=now)
        append(
            pipe,
            events_key(prefix),
            {"event": stored.model_dump_json()},
            now=now,
            retention_s=retention_s,
        )
    await pipe.execute()


def read_events(
    redis: Redis, prefix: str, *, since: float, now: float, retention_s: int, chunk: int = 1000
) -> Iterator[StoredEvent]:
    """The events accepted since `since` and within the retention at `now`, oldest first."""
    oldest = max(since, now - retention_s)
    start = min_id(oldest, 0)
    while True:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = redis.xrange(  # type: ignore[assignment]
            events_key(prefix), min=start, count=chunk
        )
        for _, fields in entries:
            event = StoredEvent.model_validate_json(fields[b"event"])
            if event.at >= oldest:
                yield event
        if len(entries) < chunk:
            return
        start = "(" + entries[-1][0].decode()


# What runs on a search's accepted events after they are kept: an interleaved experiment
# credits the side that contributed each clicked result (the experiments' code supplies it;
# Services.credit holds it).
Credit = Callable[[SearchRecord, Sequence[Event]], Awaitable[None]]


async def no_credit(record: SearchRecord, events: Sequence[Event]) -> None:
    """No experiment runs: nothing to credit."""
