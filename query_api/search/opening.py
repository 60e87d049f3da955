"""What every search route opens with, as one dependency: the caller (its key, its rate limit's
meter), the request's timed stages, the search log's recorder and the prefix of the answer's
URLs; then the kind the route asks for, made of the replica's services and answered by the one
pipeline (query_api/search/pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from query_api.deps import RootPath, SearchMeter, ServicesDep, StagesDep
from query_api.http.ratelimit import Meter
from query_api.images.body import fetch_caller, read_image_query
from query_api.schemas.answers import SearchResponse
from query_api.schemas.search import Page, RecommendSearch, TextSearch
from query_api.search.embed import ImageEmbedder
from query_api.search.feedback import Recorder, SearchRecorder
from query_api.search.kinds import ImageKind, RecommendKind, SimilarKind, TextKind
from query_api.search.pipeline import SearchKind, SearchParts, answer
from query_api.services import Services

# An image costs Triton several times a text query: its embedding's deadline is this many
# times a text's.
IMAGE_TIMEOUT_FACTOR = 5


@dataclass(frozen=True)
class Searches:
    """One search request's way to its answer, whatever its kind."""

    services: Services
    meter: Meter
    log: Recorder
    parts: SearchParts

    async def answer(self, kind: SearchKind) -> SearchResponse:
        experiments, meter, log = self.services.experiments, self.meter, self.log
        return await answer(kind, self.parts, meter=meter, log=log, experiments=experiments)

    async def text(self, query: TextSearch) -> SearchResponse:
        reveal = "admin" in self.meter.caller.scopes
        return await self.answer(TextKind(query, self.services.queries, reveal_cache=reveal))

    async def image(self, page: Page, request: Request) -> SearchResponse:
        services = self.services
        api = services.settings.api
        embedder = ImageEmbedder(
            services.embedder,
            services.admission,
            services.images,
            services.metrics,
            timeout_s=api.embed_timeout_s * IMAGE_TIMEOUT_FACTOR,
        )

        async def read() -> bytes | str:
            return await read_image_query(request, api)

        async def download(url: str) -> bytes:
            return await services.fetcher.fetch(url, caller=fetch_caller(request))

        return await self.answer(ImageKind(page, embedder, read, download))

    async def similar(self, photo_id: str, page: Page) -> SearchResponse:
        return await self.answer(SimilarKind(page, photo_id))

    async def recommend(self, query: RecommendSearch) -> SearchResponse:
        return await self.answer(RecommendKind(query))


async def _searches(
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
    stages: StagesDep,
    log: SearchRecorder,
) -> Searches:
    parts = SearchParts(services.calls, services.live, services.reranking, root, stages)
    return Searches(services, meter, log, parts)


# A search route's one dependency (its query or page aside): the search scope, the rate limit
# the search's price is spent from, and the rest every kind takes.
SearchesDep = Annotated[Searches, Depends(_searches)]
