"""The dependencies routes declare: the replica's services and the authenticated caller,
with the meter of its rate limit for searches."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request, Response

from query_api.http.auth import Caller, presented_key
from query_api.http.errors import ApiError
from query_api.http.ratelimit import Meter
from query_api.http.timing import Stages
from query_api.services import Services

# Dependencies are `async def`: FastAPI runs a plain `def` one on a worker thread, a hop per
# dependency per request that costs more than these few dictionary lookups.


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_stages(request: Request) -> Stages:
    """The request's timed stages (the metrics middleware put them on its state)."""
    stages: Stages = request.state.stages
    return stages


StagesDep = Annotated[Stages, Depends(get_stages)]


async def _caller(
    request: Request,
    services: ServicesDep,
    x_api_key: Annotated[str | None, Header(description="An API key.")] = None,
    authorization: Annotated[str | None, Header(description="Bearer <API key>.")] = None,
) -> Caller:
    caller = services.keys.identify(presented_key(x_api_key, authorization))
    if caller is None:
        services.metrics.requests_by_key.labels("invalid").inc()
        raise ApiError(
            401, "unknown API key", headers={"WWW-Authenticate": 'Bearer realm="photosearch"'}
        )
    services.metrics.requests_by_key.labels(caller.name).inc()
    request.state.caller = caller
    return caller


def _require(scope: str) -> object:
    async def check(caller: Annotated[Caller, Depends(_caller)]) -> Caller:
        if scope in caller.scopes:
            return caller
        if not caller.scopes and caller.name == "anonymous":
            raise ApiError(
                401,
                "an API key is required (X-API-Key or Authorization: Bearer)",
                headers={"WWW-Authenticate": 'Bearer realm="photosearch"'},
            )
        if caller.name == "anonymous":
            raise ApiError(401, f"an API key with the {scope!r} scope is required")
        raise ApiError(403, f"the key {caller.name!r} lacks the {scope!r} scope")

    return check


# The search scope alone: a photo, its original and thumbnail, the live model. No rate limit:
# a page of results loads dozens of thumbnails at once, and none costs an embedding or a search.
ReadCaller = Annotated[Caller, Depends(_require("search"))]
AdminCaller = Annotated[Caller, Depends(_require("admin"))]


async def _meter(
    request: Request, response: Response, services: ServicesDep, caller: ReadCaller
) -> Meter:
    # After authentication: an unknown key is a 401, a key without the scope a 403, and
    # neither spends from a bucket. The route spends, once it knows what the search costs.
    address = request.client.host if request.client else None
    return Meter(services.limits, caller, address, response.headers)


# A search (text, image, more like this, a photo's duplicates): the search scope; the route
# spends the search's price from the caller's rate limit (query_api.http.ratelimit.price).
SearchMeter = Annotated[Meter, Depends(_meter)]


async def root_path(request: Request) -> str:
    """The prefix a proxy mounted the API under, for the URLs in answers."""
    return str(request.scope.get("root_path", "")).rstrip("/")


RootPath = Annotated[str, Depends(root_path)]


# The query parameters a caller may repeat (lists); any other given twice is ambiguous.
_REPEATABLE = frozenset(
    {"tags_any", "tags_all", "auto_tags_all", "not", "positive", "negative", "facets"}
)


async def once_each(request: Request) -> None:
    """Refuse a scalar query parameter given twice (`?photographer=a&photographer=b`): the
    framework would keep the last one silently, and the caller meant something else."""
    params = request.query_params
    repeated = sorted({k for k in params if k not in _REPEATABLE and len(params.getlist(k)) > 1})
    if repeated:
        lists = ", ".join(sorted(_REPEATABLE))
        raise ApiError(422, f"{', '.join(repeated)}: give each once (only {lists} repeat)")
