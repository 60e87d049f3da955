"""Each search's record in the search log, written before its answer leaves (so an event on
its results is never refused for a record still on its way); the caller's session id, if sent."""

from __future__ import annotations

import hashlib
import math
from typing import Annotated

from fastapi import Depends, Header

from core.feedback.searchlog import SESSION_PATTERN, Kind, SearchLog, SearchRecord, Side
from core.querycache import normalize_query
from query_api.deps import ServicesDep
from query_api.http.auth import ANONYMOUS, Caller
from query_api.http.errors import ApiError
from query_api.http.ratelimit import Limit, TokenBuckets, address_bucket
from query_api.schemas.answers import SearchResponse

SESSION_HEADER = "X-Session-Id"


class Recorder:
    """One request's writer of its search's record."""

    def __init__(self, log: SearchLog, session: str | None) -> None:
        self.log = log
        self.session = session

    async def record(
        self,
        response: SearchResponse,
        kind: Kind,
        query: str | None = None,
        sides: list[Side] | None = None,
    ) -> SearchResponse:
        """Keep what the answer shows (a failing Redis loses the record, never the search)."""
        record = SearchRecord(
            search_id=response.search_id,
            kind=kind,
            query=normalize_query(query) if query is not None else None,
            mode=response.mode,
            collection=response.collection,
            model_version=response.model_version,
            shown=[result.id for result in response.results],
            offset=response.offset,
            session=self.session,
            at=self.log.now(),
            sides=sides,
        )
        await self.log.write(record)
        return response


async def _recorder(
    services: ServicesDep,
    x_session_id: Annotated[
        str | None,
        Header(
            pattern=SESSION_PATTERN,
            description="A random id of the searcher's session (16-64 letters, digits, - or "
            "_; never personal data): events on the results name it too.",
        ),
    ] = None,
) -> Recorder:
    return Recorder(services.searchlog, x_session_id)


# A search's route records what it showed: `await log.record(answer, kind, query)`.
SearchRecorder = Annotated[Recorder, Depends(_recorder)]


class EventBound:
    """Events a caller may post: a token bucket of its own per API key, or per hashed address
    without one (the bucket's name never holds the address), apart from the search limits:
    an event never spends a search's token."""

    def __init__(self, buckets: TokenBuckets, per_minute: int, salt: str) -> None:
        self.buckets = buckets
        self.limit = Limit(per_minute / 60, per_minute)
        self.salt = salt

    def bucket(self, caller: Caller, address: str | None) -> str:
        if caller.name != ANONYMOUS:
            return f"events:key:{caller.name}"
        where = address_bucket(address or "unknown")
        return "events:addr:" + hashlib.sha256(f"{self.salt}:{where}".encode()).hexdigest()[:32]

    async def take(self, caller: Caller, address: str | None, count: int) -> None:
        """Spend `count` events; ApiError 429 past the bound. A failing Redis lets them by."""
        taken = await self.buckets.take(
            self.bucket(caller, address), self.limit, min(count, self.limit.burst)
        )
        if taken is None or taken.allowed:
            return
        raise ApiError(
            429,
            f"too many events: {self.limit.burst} a minute at most from one caller",
            headers={"Retry-After": str(max(1, math.ceil(taken.until_token_s)))},
        )
