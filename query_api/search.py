"""The path of one query: normalize -> cache -> Triton (on a miss) -> vector search -> results.

The model version that embeds a query is read from the name of the collection it searches,
resolved once per request, so a query never meets vectors of another model, also while a
reindex switches the live alias.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

import numpy as np

from core.embedding.arrays import Embeddings
from core.embedding.errors import EmbeddingError
from core.embedding.images import prepare_image
from core.querycache import normalize_query
from core.vectorstore import CollectionNotFound, StoredPhoto, model_version_of
from query_api.arrange import Arranged, Fetch, Ranking, arrange
from query_api.errors import ApiError, Unavailable
from query_api.hybrid import HybridPlan, Mode
from query_api.schemas import (
    MAX_OFFSET,
    Page,
    Photo,
    PhotoMetadata,
    RecommendSearch,
    Result,
    SearchResponse,
    TextSearch,
)
from query_api.services import Services
from query_api.timing import Stages

_METADATA = tuple(PhotoMetadata.model_fields)
R = TypeVar("R")


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
        **photo_urls(root, photo_id),
    }


def stored_photo(root: str, record: StoredPhoto) -> Photo:
    return Photo(**to_photo(root, record.photo_id, record.payload))


async def _timed_embed(
    svc: Services, model: str, call: Callable[[], Awaitable[Embeddings]]
) -> Embeddings:
    start = time.perf_counter()
    try:
        return await call()
    except EmbeddingError as exc:
        svc.metrics.triton_errors.labels(model, type(exc).__name__).inc()
        raise
    finally:
        svc.metrics.triton_seconds.labels(model).observe(time.perf_counter() - start)


async def embed_query(
    svc: Services, normalized: str, version: int, stages: Stages
) -> tuple[Embeddings, bool]:
    """The query's embedding at this model version and whether it came from the cache.

    One Redis round trip reads the cache and counts the query (the pre-warm's popularity);
    on a miss the query takes an admission slot, then is tokenized here and embedded by
    Triton; the cache is filled after the answer, off its path.
    """
    with stages.timed("cache"):
        vector, outcome = await svc.cache.get_and_count(version, normalized)
    svc.metrics.cache.labels(outcome).inc()
    if vector is not None:
        return vector, True
    key = (version, normalized)
    shared = svc.inflight.get(key)
    if shared is not None:  # the same query is already being embedded: wait for that call
        with stages.timed("embed"):
            return await asyncio.shield(shared), False
    future: asyncio.Future[Embeddings] = asyncio.get_running_loop().create_future()
    svc.inflight[key] = future
    try:
        async with svc.admission.slot("text", stages):
            vector = await _embed_text(svc, normalized, version, stages)
        future.set_result(vector)
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # retrieved here, so a future nobody else awaited does not warn
        raise
    finally:
        del svc.inflight[key]
    svc.later(svc.cache.put(version, normalized, vector))
    return vector, False


async def _embed_text(svc: Services, normalized: str, version: int, stages: Stages) -> Embeddings:
    embedder = svc.embedder
    with stages.timed("tokenize"):
        tokenizer = await embedder.load_tokenizer(version)
        # A query is a few dozen characters: tokenizing it here (tens of microseconds)
        # costs less than the hop to a thread and back.
        ids = tokenizer.encode_batch([normalized])
    with stages.timed("embed"):
        embeddings = await _timed_embed(
            svc,
            "text",
            lambda: embedder.encode_token_ids(
                ids, model_version=version, timeout_s=svc.settings.api.embed_timeout_s
            ),
        )
    vector: Embeddings = embeddings[0]
    return vector


def _nearest(
    svc: Services, collection: str, vector: Embeddings, page: Page, exclude: tuple[str, ...]
) -> Fetch:
    def fetch(limit: int, offset: int, with_vectors: bool) -> Ranking:
        hits = svc.store.search(
            collection,
            vector,
            limit=limit,
            offset=offset,
            filter=page.to_store(exclude),
            score_threshold=page.score_threshold,
            with_vectors=with_vectors,
        )
        return Ranking(hits, more=len(hits) == limit)

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
    )


async def _with_live_collection(
    svc: Services, stages: Stages, run: Callable[[str], Awaitable[R]]
) -> tuple[R, str]:
    """Resolve the live collection and run; once more, asking the store, if it was dropped
    in between (or since the name was last asked)."""
    for attempt in (1, 2):
        with stages.timed("resolve"):
            collection = await svc.live_collection(fresh=attempt == 2)
        try:
            return await run(collection), collection
        except CollectionNotFound:
            if attempt == 2:
                raise Unavailable(
                    "vector_store",
                    f"{collection} disappeared during the search",
                    svc.settings.api.retry_after_s,
                ) from None
    raise AssertionError("unreachable")


async def text_search(
    svc: Services, root: str, query: TextSearch, reveal_cache: bool, stages: Stages
) -> SearchResponse:
    """`reveal_cache`: say whether the embedding came from the cache. Only to an operator (an
    admin key): to anyone else it would tell whether some other caller searched the phrase."""
    start = time.perf_counter()

    async def run(collection: str) -> tuple[Arranged, bool, Mode]:
        vector, cached = None, True
        if query.mode != "keyword":
            vector, cached = await _query_vector(svc, query, model_version_of(collection), stages)
        if query.mode == "vector":
            assert vector is not None
            fetch = _nearest(svc, collection, vector, query, ())
            return await arrange(svc, "text", collection, query, stages, fetch), cached, "vector"
        plan = HybridPlan.of(svc.store, collection, query, vector)
        arranged = await arrange(svc, "text", collection, query, stages, plan.fetch, pooled=True)
        return arranged, cached, plan.mode_ran

    (arranged, cached, mode), collection = await _with_live_collection(svc, stages, run)
    reveal = cached if reveal_cache and query.mode != "keyword" else None
    return _response(root, arranged, collection, reveal, query, start, mode)


async def _query_vector(
    svc: Services, query: TextSearch, version: int, stages: Stages
) -> tuple[Embeddings, bool]:
    """The query's embedding, moved away from its `not` descriptions: q - w x mean(not),
    unit length again (as Marqo's negative weights and rclip's "-" do)."""
    normalized = normalize_query(query.q)
    if not query.not_ or query.not_weight == 0:
        return await embed_query(svc, normalized, version, stages)
    texts = [normalized, *dict.fromkeys(normalize_query(t) for t in query.not_)]
    each = [Stages() for _ in texts]
    embedded = await asyncio.gather(
        *(embed_query(svc, t, version, st) for t, st in zip(texts, each, strict=True))
    )
    stages.overlapped(each)
    vectors = np.stack([np.asarray(v, dtype=np.float32) for v, _ in embedded])
    moved = vectors[0] - query.not_weight * vectors[1:].mean(axis=0)
    norm = float(np.linalg.norm(moved))
    if norm < 1e-6:  # the query is its own `not`: nothing is left to search for
        raise ApiError(422, "the query and its `not` descriptions cancel each other out")
    return (moved / norm).astype(np.float32), all(c for _, c in embedded)


async def image_search(
    svc: Services, root: str, data: bytes, page: Page, stages: Stages
) -> SearchResponse:
    start = time.perf_counter()

    async def run(collection: str) -> Arranged:
        version = model_version_of(collection)
        spec = svc.embedder.manifest(version).image
        limits = svc.embedder.image_limits
        async with svc.admission.slot("image", stages):
            with stages.timed("decode"):
                # Decoded on the image threads, inside their memory budget.
                pixels = await svc.images.run(
                    lambda reserve: prepare_image(data, spec, limits, reserve)
                )
            with stages.timed("embed"):
                vectors = await _timed_embed(
                    svc,
                    "image",
                    lambda: svc.embedder.encode_images(
                        [pixels],
                        model_version=version,
                        timeout_s=svc.settings.api.embed_timeout_s * 5,
                    ),
                )
        fetch = _nearest(svc, collection, vectors[0], page, ())
        return await arrange(svc, "image", collection, page, stages, fetch)

    arranged, collection = await _with_live_collection(svc, stages, run)
    return _response(root, arranged, collection, None, page, start)


async def _stored_vectors(
    svc: Services, collection: str, photo_ids: list[str], stages: Stages
) -> list[Embeddings]:
    """The stored vectors of photos, in the order asked; 404 names a photo not indexed."""
    with stages.timed("retrieve"):
        found = await svc.in_store(
            "retrieve", lambda: svc.store.retrieve(collection, photo_ids, with_vectors=True)
        )
    vectors = {record.photo_id: record.vector for record in found}
    for photo_id in photo_ids:
        if vectors.get(photo_id) is None:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
    return [v for pid in dict.fromkeys(photo_ids) if (v := vectors[pid]) is not None]


async def similar_search(
    svc: Services, root: str, photo_id: str, page: Page, stages: Stages
) -> SearchResponse:
    """More like this: the stored vector of a photo, not a new embedding; never itself."""
    start = time.perf_counter()

    async def run(collection: str) -> Arranged:
        (vector,) = await _stored_vectors(svc, collection, [photo_id], stages)
        fetch = _nearest(svc, collection, vector, page, (photo_id,))
        return await arrange(svc, "similar", collection, page, stages, fetch, exclude=(photo_id,))

    arranged, collection = await _with_live_collection(svc, stages, run)
    return _response(root, arranged, collection, None, page, start)


async def recommend_search(
    svc: Services, root: str, query: RecommendSearch, stages: Stages
) -> SearchResponse:
    """More like these and not like those: the store's recommendation query over the stored
    vectors of the examples, none of which is a result."""
    start = time.perf_counter()
    examples = tuple(dict.fromkeys([*query.positive, *query.negative]))

    async def run(collection: str) -> Arranged:
        vectors = await _stored_vectors(svc, collection, list(examples), stages)
        by_id = dict(zip(examples, vectors, strict=True))
        positive = [by_id[p] for p in dict.fromkeys(query.positive)]
        negative = [by_id[n] for n in dict.fromkeys(query.negative) if n not in query.positive]

        def fetch(limit: int, offset: int, with_vectors: bool) -> Ranking:
            hits = svc.store.recommend(
                collection,
                positive,
                negative,
                limit=limit,
                offset=offset,
                filter=query.to_store(examples),
                score_threshold=query.score_threshold,
                with_vectors=with_vectors,
            )
            return Ranking(hits, more=len(hits) == limit)

        return await arrange(svc, "recommend", collection, query, stages, fetch, exclude=examples)

    arranged, collection = await _with_live_collection(svc, stages, run)
    return _response(root, arranged, collection, None, query, start)
