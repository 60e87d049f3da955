"""The one path of every search, whatever its kind (text, image, more like this, recommend):
admission (its price from the caller's rate limit) -> the live collection -> the kind's query
(its vectors: embedded, or the stored vectors of photos) -> the candidate pool -> the page
arranged, with its facets -> the answer, recorded in the search log.

The model version that embeds a query is read from the name of the collection it searches,
resolved once per request, so a query never meets vectors of another model, also while a
reindex switches the live alias. A kind (query_api/search/kinds.py) says only what is its own:
how it gets its ranking of a collection, what it costs, what the log keeps of it. Each search
takes the parts it uses (the store's calls, the live collection, the re-ranking); the routes
take them from the replica's Services (query_api/search/opening.py).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar, Protocol, Self, TypeVar
from urllib.parse import quote

from core.embedding.arrays import Embeddings
from core.feedback.searchlog import Kind, Side, new_search_id
from core.payload import PhotoPayload
from core.vectorstore import (
    CollectionNotFound,
    Hit,
    SearchFilter,
    StoredPhoto,
    VectorStore,
    model_version_of,
)
from core.vectorstore.base import AUTO_TAGS_FIELD
from core.vectorstore.engine import Boosted
from query_api.http.errors import Unavailable
from query_api.http.ratelimit import Meter, price
from query_api.http.timing import Stages
from query_api.schemas.answers import Photo, PhotoMetadata, Result, SearchResponse
from query_api.schemas.attributes import attributes_of
from query_api.schemas.search import MAX_OFFSET, Page
from query_api.search.arrange import Arranged, Candidates, Fetch, Ranking, Read, arrange
from query_api.search.candidate import NamedCollection
from query_api.search.experiment import Draw, Experiments, interleaved_search
from query_api.search.facets import facet_reads
from query_api.search.feedback import Recorder
from query_api.search.hybrid import Mode
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection, StoreCalls

_METADATA = tuple(PhotoMetadata.model_fields)
R = TypeVar("R")


def photo_urls(root: str, photo_id: str) -> dict[str, str]:
    base = f"{root}/v1/photos/{quote(photo_id, safe='/')}"
    return {"image_url": f"{base}/image", "thumbnail_url": f"{base}/thumbnail"}


def to_photo(root: str, photo_id: str, payload: PhotoPayload) -> dict[str, Any]:
    metadata = {name: payload.get(name) for name in _METADATA if payload.get(name) is not None}
    return {
        "id": photo_id,
        "metadata": PhotoMetadata(**metadata),
        "model_version": payload.get("model_version"),
        "indexed_at": payload.get("indexed_at"),
        "auto_tags": list(payload.get(AUTO_TAGS_FIELD) or []),
        "attributes": attributes_of(payload),
        **photo_urls(root, photo_id),
    }


def stored_photo(root: str, record: StoredPhoto) -> Photo:
    return Photo(**to_photo(root, record.photo_id, record.payload))


class Rank(Protocol):
    """A ranking query of the store with its query already given (`VectorStore.search` of a
    vector, `VectorStore.recommend` of examples): the options every read of it sets."""

    def __call__(
        self,
        *,
        limit: int,
        offset: int,
        filter: SearchFilter,
        score_threshold: float | None,
        with_vectors: bool,
        boost: Boosted | None,
        pool: int,
        fields: Sequence[str] | None,
    ) -> list[Hit]: ...


def ranked(rank: Rank, page: Page, exclude: tuple[str, ...], boost: Boosted | None) -> Fetch:
    """The ranking of a store query under the page's filters and threshold, never the
    `exclude`d photos; `boost` re-scores each pool by its formula."""

    def fetch(read: Read) -> Ranking:
        count = read.kept  # one ranking: its first `keep` are all it needs
        hits = rank(
            limit=count,
            offset=read.offset,
            filter=page.to_store(exclude),
            score_threshold=page.score_threshold,
            with_vectors=read.with_vectors,
            boost=boost,  # a boost re-scores the best `limit` (the pool) by its formula
            pool=read.limit,
            fields=read.fields,
        )
        return Ranking(hits, more=len(hits) == count)

    return fetch


def nearest_fetch(
    store: VectorStore,
    collection: str,
    vector: Embeddings,
    page: Page,
    exclude: tuple[str, ...],
    boost: Boosted | None = None,
) -> Fetch:
    """The ranking of the photos nearest a vector (see `ranked`)."""
    return ranked(partial(store.search, collection, vector), page, exclude, boost)


@dataclass(frozen=True)
class SearchParts:
    """What every search takes: the store's calls, the collection it reads (the live one, or
    an experiment's candidate), the re-ranking threads, the prefix of its answers' URLs and the
    request's timed stages."""

    calls: StoreCalls
    live: LiveCollection
    reranking: Reranking
    root: str
    stages: Stages


@dataclass(frozen=True)
class Query:
    """A kind's query of one collection: the ranking its candidates come from; whether its
    embedding came from the cache (None: not told); the mode that ranked it, once read (a
    hybrid search falls back to vectors on a collection without keywords)."""

    fetch: Fetch
    cached: bool | None = None
    mode: Callable[[], Mode | None] = lambda: None


@dataclass(frozen=True)
class SearchKind(ABC):
    """The part of a search its kind decides (query_api/search/kinds.py); the rest of its
    path is the pipeline's, the same for every kind."""

    page: Page

    # The kind's name: the search log's, and the label of its store reads in the metrics.
    name: ClassVar[Kind]

    @property
    def embeddings(self) -> int:
        """How many embeddings the search makes: its price (query_api.http.ratelimit.price)."""
        return 0

    @property
    def pooled(self) -> bool:
        """Whether its ranking is one the store cannot page (a fusion of two)."""
        return False

    @property
    def exclude(self) -> tuple[str, ...]:
        """Photos that are no result and no one's near-duplicate (the examples)."""
        return ()

    @property
    def logged(self) -> str | None:
        """The query the search log keeps (the text of a text search)."""
        return None

    async def prepared(self, stages: Stages) -> Self:
        """The search ready to run, once paid for (an image's upload read, or fetched)."""
        return self

    async def draw(self, experiments: Experiments, session: str | None) -> Draw | None:
        """The running experiment's draw of this search (None: it interleaves none)."""
        return None

    @abstractmethod
    async def query(self, collection: str, boost: Boosted | None, parts: SearchParts) -> Query: ...


async def search(kind: SearchKind, parts: SearchParts) -> SearchResponse:
    """One search of the live collection (or of `parts.live`'s): the kind's query, its
    candidates arranged into the page with its facets, the answer."""
    start = time.perf_counter()
    page, stages = kind.page, parts.stages
    boost = parts.reranking.boosts.of_page(page)

    async def run(collection: str) -> tuple[Arranged, Query]:
        query = await kind.query(collection, boost, parts)
        candidates = Candidates(
            parts.calls, kind.name, collection, query.fetch, kind.pooled, kind.exclude
        )
        return await arrange(candidates, parts.reranking, page, stages), query

    (arranged, query), collection = await _with_live_collection(parts.live, stages, run)
    return _response(parts.root, arranged, collection, query, page, start)


async def answer(
    kind: SearchKind,
    parts: SearchParts,
    *,
    meter: Meter,
    log: Recorder,
    experiments: Experiments,
) -> SearchResponse:
    """A search request's answer: its price spent from the caller's rate limit before any
    work (a 422 for a page past the diversity window spends nothing; one token per embedding,
    one per full thousand candidates re-ranked or counted for facets), the search (beside an
    experiment's candidate when drawn into its share), and its record in the search log."""
    reranking = parts.reranking
    reranking.check(kind.page)
    reads = reranking.candidates(kind.page, pooled=kind.pooled)
    reads += facet_reads(kind.page, reranking.facet_pool)
    # The price is the live search's: an experiment's candidate search is never charged.
    async with meter.paying(price(kind.embeddings, reads)):
        kind = await kind.prepared(parts.stages)
        draw = await kind.draw(experiments, log.session)
        sides: list[Side] | None = None
        if draw is None:
            response = await search(kind, parts)
        else:
            response, sides = await _interleaved(kind, parts, draw, experiments)
    return await log.record(response, kind.name, kind.logged, sides)


async def _interleaved(
    kind: SearchKind, parts: SearchParts, draw: Draw, experiments: Experiments
) -> tuple[SearchResponse, list[Side] | None]:
    # The answer's facets are the live search's: a candidate's would be read for nothing.
    candidate = replace(kind, page=kind.page.model_copy(update={"facets": []}))

    async def search_in(collection: str | None, stages: Stages) -> SearchResponse:
        """The search of the live collection (None), or of an experiment's candidate."""
        if collection is None:
            return await search(kind, replace(parts, stages=stages))
        named = NamedCollection(parts.calls, collection)
        return await search(candidate, replace(parts, live=named, stages=stages))

    return await interleaved_search(
        draw, kind.page.limit, search_in, parts.stages, experiments.metrics
    )


def _response(
    root: str, arranged: Arranged, collection: str, query: Query, page: Page, start: float
) -> SearchResponse:
    results = [
        Result(
            score=hit.score,
            duplicates=arranged.duplicates.get(hit.photo_id),
            **to_photo(root, hit.photo_id, hit.payload),
        )
        for hit in arranged.hits[: page.limit]
    ]
    more = len(arranged.hits) > page.limit and page.offset + page.limit <= MAX_OFFSET
    return SearchResponse(
        results=results,
        mode=query.mode(),
        model_version=model_version_of(collection),
        collection=collection,
        cached=query.cached,
        limit=page.limit,
        offset=page.offset,
        next_offset=page.offset + page.limit if more else None,
        took_ms=round((time.perf_counter() - start) * 1000, 2),
        search_id=new_search_id(),
        facets=arranged.facets,
    )


async def _with_live_collection(
    live: LiveCollection, stages: Stages, run: Callable[[str], Awaitable[R]]
) -> tuple[R, str]:
    """Resolve the live collection and run; once more, asking the store, if it was dropped
    in between (or since the name was last asked)."""
    for attempt in (1, 2):
        with stages.timed("resolve"):
            collection = await live.name(fresh=attempt == 2)
        try:
            return await run(collection), collection
        except CollectionNotFound:
            if attempt == 2:
                raise Unavailable(
                    "vector_store",
                    f"{collection} disappeared during the search",
                    live.calls.retry_after_s,
                ) from None
    raise AssertionError("unreachable")
