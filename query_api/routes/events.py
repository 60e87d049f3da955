"""What searchers did with the results: events on a search's results, checked against the
search log, bounded per caller, kept for the retention (core.feedback.events)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from core.feedback.events import BadEvent, Event, EventBatch, check, store_events
from query_api.deps import ReadCaller, ServicesDep
from query_api.http.errors import ApiError, Unavailable
from query_api.schemas.answers import ErrorResponse
from query_api.search.feedback import EventBound

router = APIRouter(prefix="/v1/events", tags=["feedback"])

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 422, 429, 503)
}


class EventsAccepted(BaseModel):
    """What was kept."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"accepted": 3, "searches": 1}]})

    accepted: int = Field(description="Events kept.")
    searches: int = Field(description="Distinct searches they were about.")


@router.post("", status_code=202, response_model=EventsAccepted, responses=ERRORS)
async def post_events(
    batch: EventBatch, request: Request, services: ServicesDep, caller: ReadCaller
) -> EventsAccepted:
    """Record what a searcher did with a search's results: opened, downloaded or skipped."""
    api = services.settings.api
    events = batch.events
    if len(events) > api.events_batch_max:
        raise ApiError(422, f"events: at most {api.events_batch_max} a request, not {len(events)}")
    address = request.client.host if request.client else None
    limits = services.limits.buckets
    await EventBound(limits, api.events_per_minute, services.settings.redis.prefix).take(
        caller, address, len(events)
    )
    log = services.searchlog
    ok, searches = await log.guard.call("events", log.load([e.search_id for e in events]))
    if not ok or searches is None:
        raise Unavailable("redis", "the search log cannot be read now", api.retry_after_s)
    try:
        check(events, batch.session, searches)
    except BadEvent as exc:
        raise ApiError(422, str(exc)) from None
    stored, _ = await log.guard.call(
        "events",
        store_events(
            log.redis,
            log.prefix,
            events,
            batch.session,
            now=log.now(),
            retention_s=log.retention_s,
        ),
    )
    if not stored:
        raise Unavailable("redis", "the events cannot be kept now", api.retry_after_s)
    by_search: dict[str, list[Event]] = {}
    for event in events:
        by_search.setdefault(event.search_id, []).append(event)
    for search_id, its_events in by_search.items():
        await services.credit(searches[search_id], its_events)
    return EventsAccepted(accepted=len(events), searches=len(by_search))
