"""The path of one query: normalize -> cache -> Triton (on a miss) -> vector search -> results.

The model version that embeds a query is read from the name of the collection it searches,
resolved once per request, so a query never meets vectors of another model, also while a
reindex switches the live alias. Each search takes the parts it uses (the store's calls, the
live collection, the query embedder); the routes take them from the replica's Services.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import numpy as np

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.images import ImageLimits, prepare_image
from core.embedding.manifest import ModelManifest
from core.feedback.searchlog import new_search_id
from core.querycache import normalize_query
from core.vectorstore import CollectionNotFound, StoredPhoto, VectorStore, model_version_of
from core.vectorstore.base import AUTO_TAGS_FIELD
from core.vectorstore.engine import Boosted
from query_api.http.admission import Admission
from query_api.http.errors import ApiError, Unavailable
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.images.work import ImageWork
from query_api.schemas.answers import Photo, PhotoMetadata, Result, SearchResponse
from query_api.schemas.attributes import attributes_of
from query_api.schemas.search import MAX_OFFSET, Page, RecommendSearch, TextSearch
from query_api.search.arrange import Arranged, Candidates, Fetch, Ranking, Read, arrange
from query_api.search.embed import QueryEmbedder, timed_embed
from query_api.search.hybrid import HybridPlan, Mode
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection, StoreCalls

_METADATA = tuple(PhotoMetadata.model_fields)
R = TypeVar("R")


class ImageEncoder(Protocol):
    """What embedding an image query takes of the embedding client."""

    image_limits: ImageLimits

    def manifest(self, version: int) -> ModelManifest: ...

    async def encode_images(
        self,
        pixels: Sequence[Pixels] | Pixels,
        *,
        model_version: int,
        timeout_s: float | None = None,
        chunk: int = ...,
    ) -> Embeddings: ...


def photo_urls(root: str, photo_id: str) -> dict[str, str]:
    base = f"{root}/v1/photos/{quote(photo_id, safe='/')}"
    return {"image_url": f"{base}/image", "thumbnail_url": f"{base}/thumbnail"}


def to_photo(root: str, photo_id: str, payload: dict[str, Any]) -> dict[str, Any]:
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


def nearest_fetch(
    store: VectorStore,
    collection: str,
    vector: Embeddings,
    page: Page,
    exclude: tuple[str, ...],
    boost: Boosted | None = None,
) -> Fetch:
    """The ranking of the photos nearest a vector, under the page's filters and threshold,
    never the `exclude`d ones; `boost` re-scores each pool by its formula."""

    def fetch(read: Read) -> Ranking:
        count = read.kept  # one ranking: its first `keep` are all it needs
        hits = store.search(
            collection,
            vector,
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


def _response(
    root: str,
    arranged: Arranged,
    collection: str,
    cached: bool | None,
    page: Page,
    start: float,
    mode: Mode | None = None,
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
        mode=mode,
        model_version=model_version_of(collection),
        collection=collection,
        cached=cached,
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


async def text_search(
    query: TextSearch,
    *,
    queries: QueryEmbedder,
    calls: StoreCalls,
    live: LiveCollection,
    reranking: Reranking,
    root: str,
    reveal_cache: bool,
    stages: Stages,
) -> SearchResponse:
    """`reveal_cache`: say whether the embedding came from the cache. Only to an operator (an
    admin key): to anyone else it would tell whether some other caller searched the phrase."""
    start = time.perf_counter()
    store = calls.store
    boost = reranking.boosts.of_page(query)

    async def run(collection: str) -> tuple[Arranged, bool, Mode]:
        vector, cached, calibration = None, True, None
        if query.mode != "keyword":
            version = model_version_of(collection)
            vector, cached = await _query_vector(queries, query, version, stages)
            calibration = queries.calibration(version)
        if query.mode == "vector":
            assert vector is not None
            fetch = nearest_fetch(store, collection, vector, query, (), boost)
            candidates = Candidates(calls, "text", collection, fetch)
            arranged = await arrange(candidates, reranking, query, stages)
            return arranged, cached, "vector"
        plan = HybridPlan.of(store, collection, query, vector, calibration)
        plan.boost = boost
        candidates = Candidates(calls, "text", collection, plan.fetch, pooled=True)
        arranged = await arrange(candidates, reranking, query, stages)
        return arranged, cached, plan.mode_ran

    (arranged, cached, mode), collection = await _with_live_collection(live, stages, run)
    reveal = cached if reveal_cache and query.mode != "keyword" else None
    return _response(root, arranged, collection, reveal, query, start, mode)


def text_embeddings(query: TextSearch) -> int:
    """How many embeddings a text search makes: none by words alone; the query's, and each
    distinct `not` text's when they move it (its price: query_api.http.ratelimit.price)."""
    if query.mode == "keyword":
        return 0
    if not query.not_ or query.not_weight == 0:
        return 1
    return len(dict.fromkeys(normalize_query(t) for t in [query.q, *query.not_]))


async def _query_vector(
    queries: QueryEmbedder, query: TextSearch, version: int, stages: Stages
) -> tuple[Embeddings, bool]:
    """The query's embedding, moved away from its `not` descriptions: q - w x mean(not),
    unit length again (as Marqo's negative weights and rclip's "-" do)."""
    normalized = normalize_query(query.q)
    if not query.not_ or query.not_weight == 0:
        return await queries.embed(normalized, version, stages)
    texts = [normalized, *dict.fromkeys(normalize_query(t) for t in query.not_)]
    each = [Stages() for _ in texts]
    embedded = await asyncio.gather(
        *(queries.embed(t, version, st) for t, st in zip(texts, each, strict=True))
    )
    stages.overlapped(each)
    vectors = np.stack([np.asarray(v, dtype=np.float32) for v, _ in embedded])
    moved = vectors[0] - query.not_weight * vectors[1:].mean(axis=0)
    norm = float(np.linalg.norm(moved))
    if norm < 1e-6:  # the query is its own `not`: nothing is left to search for
        raise ApiError(422, "the query and its `not` descriptions cancel each other out")
    return (moved / norm).astype(np.float32), all(c for _, c in embedded)


async def image_search(
    data: bytes,
    page: Page,
    *,
    encoder: ImageEncoder,
    admission: Admission,
    images: ImageWork,
    metrics: Metrics,
    timeout_s: float,
    calls: StoreCalls,
    live: LiveCollection,
    reranking: Reranking,
    root: str,
    stages: Stages,
) -> SearchResponse:
    """Photos that look like the encoded image `data`; `timeout_s`: its embedding's deadline."""
    start = time.perf_counter()
    boost = reranking.boosts.of_page(page)

    async def run(collection: str) -> Arranged:
        version = model_version_of(collection)
        spec = encoder.manifest(version).image
        limits = encoder.image_limits
        async with admission.slot("image", stages):
            with stages.timed("decode"):
                # Decoded on the image threads, inside their memory budget.
                pixels = await images.run(
                    lambda reserve: prepare_image(data, spec, limits, reserve)
                )
            with stages.timed("embed"):
                vectors = await timed_embed(
                    metrics,
                    "image",
                    lambda: encoder.encode_images(
                        [pixels], model_version=version, timeout_s=timeout_s
                    ),
                )
        fetch = nearest_fetch(calls.store, collection, vectors[0], page, (), boost)
        return await arrange(Candidates(calls, "image", collection, fetch), reranking, page, stages)

    arranged, collection = await _with_live_collection(live, stages, run)
    return _response(root, arranged, collection, None, page, start)


async def _stored_vectors(
    calls: StoreCalls, collection: str, photo_ids: list[str], stages: Stages
) -> list[Embeddings]:
    """The stored vectors of photos, in the order asked; 404 names a photo not indexed."""
    store = calls.store
    with stages.timed("retrieve"):
        found = await calls.run(
            "retrieve", lambda: store.retrieve(collection, photo_ids, with_vectors=True)
        )
    vectors = {record.photo_id: record.vector for record in found}
    for photo_id in photo_ids:
        if vectors.get(photo_id) is None:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
    return [v for pid in dict.fromkeys(photo_ids) if (v := vectors[pid]) is not None]


async def similar_search(
    photo_id: str,
    page: Page,
    *,
    calls: StoreCalls,
    live: LiveCollection,
    reranking: Reranking,
    root: str,
    stages: Stages,
) -> SearchResponse:
    """More like this: the stored vector of a photo, not a new embedding; never itself."""
    start = time.perf_counter()
    boost = reranking.boosts.of_page(page)

    async def run(collection: str) -> Arranged:
        (vector,) = await _stored_vectors(calls, collection, [photo_id], stages)
        fetch = nearest_fetch(calls.store, collection, vector, page, (photo_id,), boost)
        candidates = Candidates(calls, "similar", collection, fetch, exclude=(photo_id,))
        return await arrange(candidates, reranking, page, stages)

    arranged, collection = await _with_live_collection(live, stages, run)
    return _response(root, arranged, collection, None, page, start)


async def recommend_search(
    query: RecommendSearch,
    *,
    calls: StoreCalls,
    live: LiveCollection,
    reranking: Reranking,
    root: str,
    stages: Stages,
) -> SearchResponse:
    """More like these and not like those: the store's recommendation query over the stored
    vectors of the examples, none of which is a result."""
    start = time.perf_counter()
    examples = tuple(dict.fromkeys([*query.positive, *query.negative]))
    store = calls.store
    boost = reranking.boosts.of_page(query)

    async def run(collection: str) -> Arranged:
        vectors = await _stored_vectors(calls, collection, list(examples), stages)
        by_id = dict(zip(examples, vectors, strict=True))
        positive = [by_id[p] for p in dict.fromkeys(query.positive)]
        negative = [by_id[n] for n in dict.fromkeys(query.negative) if n not in query.positive]

        def fetch(read: Read) -> Ranking:
            count = read.kept
            hits = store.recommend(
                collection,
                positive,
                negative,
                limit=count,
                offset=read.offset,
                filter=query.to_store(examples),
                score_threshold=query.score_threshold,
                with_vectors=read.with_vectors,
                boost=boost,
                pool=read.limit,
                fields=read.fields,
            )
            return Ranking(hits, more=len(hits) == count)

        candidates = Candidates(calls, "recommend", collection, fetch, exclude=examples)
        return await arrange(candidates, reranking, query, stages)

    arranged, collection = await _with_live_collection(live, stages, run)
    return _response(root, arranged, collection, None, query, start)
