"""Search by text (GET or POST) and by an image (uploaded, or fetched from its URL)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from query_api.deps import once_each
from query_api.images.body import OPENAPI
from query_api.schemas.answers import ErrorResponse, SearchResponse
from query_api.schemas.search import Page, RecommendSearch, TextSearch
from query_api.search.opening import SearchesDep

router = APIRouter(prefix="/v1/search", tags=["search"], dependencies=[Depends(once_each)])

# Every search spends its price from the caller's rate limit before any work
# (query_api/search/pipeline.py's `answer`; query_api.http.ratelimit.price).

# 400: FastAPI refuses a body that is not UTF-8 JSON (or not multipart) before validating.
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 413, 422, 429, 503)
}
# 404: an example photo is not in the index.
RECOMMEND_ERRORS: dict[int | str, dict[str, object]] = {**ERRORS, 404: {"model": ErrorResponse}}
# 502 / 504: the server of an image's URL failed or was too slow.
IMAGE_ERRORS: dict[int | str, dict[str, object]] = {
    **ERRORS,
    **{code: {"model": ErrorResponse} for code in (502, 504)},
}


@router.get("", response_model=SearchResponse, responses=ERRORS)
async def search_get(query: Annotated[TextSearch, Query()], search: SearchesDep) -> SearchResponse:
    """Photos that match a description; repeat `tags_any` / `tags_all` for several tags."""
    return await search.text(query)


@router.post("", response_model=SearchResponse, responses=ERRORS)
async def search_post(query: TextSearch, search: SearchesDep) -> SearchResponse:
    """The same search with a JSON body (long filter lists)."""
    return await search.text(query)


@router.get("/recommend", response_model=SearchResponse, responses=RECOMMEND_ERRORS)
async def recommend_get(
    query: Annotated[RecommendSearch, Query()], search: SearchesDep
) -> SearchResponse:
    """More like these photos and not like those: repeat `positive` and `negative`."""
    return await search.recommend(query)


@router.post("/recommend", response_model=SearchResponse, responses=RECOMMEND_ERRORS)
async def recommend_post(query: RecommendSearch, search: SearchesDep) -> SearchResponse:
    """The same with a JSON body."""
    return await search.recommend(query)


@router.post("/image", response_model=SearchResponse, responses=IMAGE_ERRORS, openapi_extra=OPENAPI)
async def search_image(
    request: Request, page: Annotated[Page, Query()], search: SearchesDep
) -> SearchResponse:
    """Photos that look like an image: uploaded as `file`, or fetched from its `url`."""
    # Paid before the body is read or the URL fetched.
    return await search.image(page, request)
