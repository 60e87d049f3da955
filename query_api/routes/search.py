"""Search by text (GET or POST) and by an image (uploaded, or fetched from its URL)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from query_api.deps import RootPath, SearchMeter, ServicesDep, StagesDep, once_each
from query_api.http.ratelimit import price
from query_api.http.timing import Stages
from query_api.images.body import OPENAPI, fetch_caller, read_image_query
from query_api.schemas.answers import ErrorResponse, SearchResponse
from query_api.schemas.search import Page, RecommendSearch, TextSearch
from query_api.search.candidate import NamedCollection
from query_api.search.experiment import interleaved_search
from query_api.search.facets import facet_reads
from query_api.search.feedback import Recorder, SearchRecorder
from query_api.search.pipeline import image_search, recommend_search, text_embeddings, text_search
from query_api.services import Services

router = APIRouter(prefix="/v1/search", tags=["search"], dependencies=[Depends(once_each)])

# Every search spends its price from the caller's rate limit before any work (a 422 for a
# page past the diversity window spends nothing): one token per embedding, one per full
# thousand candidates re-ranked or counted for facets (query_api.http.ratelimit.price).

# 400: FastAPI refuses a body that is not UTF-8 JSON (or not multipart) before validating.
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 413, 422, 429, 503)
}


async def _text_search(
    services: Services,
    root: str,
    query: TextSearch,
    meter: SearchMeter,
    stages: Stages,
    log: Recorder,
) -> SearchResponse:
    reranking = services.reranking
    reranking.check(query)
    reranked = reranking.candidates(query, pooled=query.mode != "vector")
    reranked += facet_reads(query, reranking.facet_pool)

    async def search_in(collection: str | None, at: Stages) -> SearchResponse:
        """The search of the live collection (None), or of an experiment's candidate."""
        live = services.live if collection is None else NamedCollection(services.calls, collection)
        # The answer's facets are the live search's: a candidate's would be read for nothing.
        asked = query if collection is None else query.model_copy(update={"facets": []})
        return await text_search(
            asked,
            queries=services.queries,
            calls=services.calls,
            live=live,
            reranking=reranking,
            root=root,
            reveal_cache="admin" in meter.caller.scopes,
            stages=at,
        )

    # The price is the live search's: an experiment's candidate search is never charged.
    async with meter.paying(price(text_embeddings(query), reranked)):
        draw = await services.experiments.draw(query, log.session)
        if draw is None:
            answer, sides = await search_in(None, stages), None
        else:
            experiments = services.experiments
            answer, sides = await interleaved_search(
                draw, query.limit, search_in, stages, experiments.metrics
            )
    return await log.record(answer, "text", query.q, sides)


@router.get("", response_model=SearchResponse, responses=ERRORS)
async def search_get(
    query: Annotated[TextSearch, Query()],
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> SearchResponse:
    """Photos that match a description; repeat `tags_any` / `tags_all` for several tags."""
    return await _text_search(services, root, query, meter, stages, log)


@router.post("", response_model=SearchResponse, responses=ERRORS)
async def search_post(
    query: TextSearch,
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> SearchResponse:
    """The same search with a JSON body (long filter lists)."""
    return await _text_search(services, root, query, meter, stages, log)


async def _recommend(
    services: Services,
    root: str,
    query: RecommendSearch,
    meter: SearchMeter,
    stages: Stages,
    log: Recorder,
) -> SearchResponse:
    reranking = services.reranking
    reranking.check(query)
    reads = reranking.candidates(query, pooled=False) + facet_reads(query, reranking.facet_pool)
    async with meter.paying(price(0, reads)):
        answer = await recommend_search(
            query,
            calls=services.calls,
            live=services.live,
            reranking=reranking,
            root=root,
            stages=stages,
        )
    return await log.record(answer, "recommend")


# 404: an example photo is not in the index.
RECOMMEND_ERRORS: dict[int | str, dict[str, object]] = {**ERRORS, 404: {"model": ErrorResponse}}


@router.get("/recommend", response_model=SearchResponse, responses=RECOMMEND_ERRORS)
async def recommend_get(
    query: Annotated[RecommendSearch, Query()],
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> SearchResponse:
    """More like these photos and not like those: repeat `positive` and `negative`."""
    return await _recommend(services, root, query, meter, stages, log)


@router.post("/recommend", response_model=SearchResponse, responses=RECOMMEND_ERRORS)
async def recommend_post(
    query: RecommendSearch,
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> SearchResponse:
    """The same with a JSON body."""
    return await _recommend(services, root, query, meter, stages, log)


# 502 / 504: the server of an image's URL failed or was too slow.
IMAGE_ERRORS: dict[int | str, dict[str, object]] = {
    **ERRORS,
    **{code: {"model": ErrorResponse} for code in (502, 504)},
}


@router.post("/image", response_model=SearchResponse, responses=IMAGE_ERRORS, openapi_extra=OPENAPI)
async def search_image(
    request: Request,
    page: Annotated[Page, Query()],
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> SearchResponse:
    """Photos that look like an image: uploaded as `file`, or fetched from its `url`."""
    api = services.settings.api
    reranking = services.reranking
    reranking.check(page)
    reads = reranking.candidates(page, pooled=False) + facet_reads(page, reranking.facet_pool)
    # Paid before the body is read or the URL fetched; an image's embedding is never cached.
    async with meter.paying(price(1, reads)):
        query = await read_image_query(request, api)
        if isinstance(query, str):
            with stages.timed("fetch"):
                query = await services.fetcher.fetch(query, caller=fetch_caller(request))
        answer = await image_search(
            query,
            page,
            encoder=services.embedder,
            admission=services.admission,
            images=services.images,
            metrics=services.metrics,
            # An image costs Triton several times a text query.
            timeout_s=api.embed_timeout_s * 5,
            calls=services.calls,
            live=services.live,
            reranking=reranking,
            root=root,
            stages=stages,
        )
    return await log.record(answer, "image")
