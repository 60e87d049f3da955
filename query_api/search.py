"""The path of one query: normalize -> cache -> Triton (on a miss) -> vector search -> results.

The model version that embeds a query is read from the name of the collection it searches,
resolved once per request, so a query never meets vectors of another model, also while a
reindex switches the live alias.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from core.embedding.arrays import Embeddings
from core.embedding.errors import EmbeddingError
from core.embedding.images import prepare_image
from core.querycache import normalize_query
from core.vectorstore import CollectionNotFound, Hit, StoredPhoto, model_version_of
from query_api.errors import ApiError, Unavailable
from query_api.schemas import (
    MAX_OFFSET,
    Page,
    Photo,
    PhotoMetadata,
    Result,
    SearchResponse,
    TextSearch,
)
from query_api.services import Services
from query_api.timing import Stages

_METADATA = tuple(PhotoMetadata.model_fields)


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


async def _search(
    svc: Services,
    kind: str,
    collection: str,
    vector: Embeddings,
    page: Page,
    stages: Stages,
    exclude: str = "",
) -> list[Hit]:
    exclude_ids = (exclude,) if exclude else ()
    with stages.timed("search"):
        return await svc.in_store(
            f"search:{kind}",
            lambda: svc.store.search(
                collection,
                vector,
                limit=page.limit + 1,  # one more tells whether a next page exists
                offset=page.offset,
                filter=page.to_store(exclude_ids),
                score_threshold=page.score_threshold,
            ),
        )


def _response(
    root: str, hits: list[Hit], collection: str, cached: bool | None, page: Page, start: float
) -> SearchResponse:
    results = [
        Result(score=hit.score, **to_photo(root, hit.photo_id, hit.payload))
        for hit in hits[: page.limit]
    ]
    more = len(hits) > page.limit and page.offset + page.limit <= MAX_OFFSET
    return SearchResponse(
        results=results,
        model_version=model_version_of(collection),
        collection=collection,
        cached=cached,
        limit=page.limit,
        offset=page.offset,
        next_offset=page.offset + page.limit if more else None,
        took_ms=round((time.perf_counter() - start) * 1000, 2),
    )


async def _with_live_collection(
    svc: Services, stages: Stages, run: Callable[[str], Awaitable[tuple[list[Hit], bool]]]
) -> tuple[list[Hit], bool, str]:
    """Resolve the live collection and run; once more, asking the store, if it was dropped
    in between (or since the name was last asked)."""
    for attempt in (1, 2):
        with stages.timed("resolve"):
            collection = await svc.live_collection(fresh=attempt == 2)
        try:
            hits, cached = await run(collection)
            return hits, cached, collection
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
    normalized = normalize_query(query.q)

    async def run(collection: str) -> tuple[list[Hit], bool]:
        vector, cached = await embed_query(svc, normalized, model_version_of(collection), stages)
        return await _search(svc, "text", collection, vector, query, stages), cached

    hits, cached, collection = await _with_live_collection(svc, stages, run)
    return _response(root, hits, collection, cached if reveal_cache else None, query, start)


async def image_search(
    svc: Services, root: str, data: bytes, page: Page, stages: Stages
) -> SearchResponse:
    start = time.perf_counter()

    async def run(collection: str) -> tuple[list[Hit], bool]:
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
        return await _search(svc, "image", collection, vectors[0], page, stages), False

    hits, _, collection = await _with_live_collection(svc, stages, run)
    return _response(root, hits, collection, None, page, start)


async def similar_search(
    svc: Services, root: str, photo_id: str, page: Page, stages: Stages
) -> SearchResponse:
    """More like this: the stored vector of a photo, not a new embedding; never itself."""
    start = time.perf_counter()

    async def run(collection: str) -> tuple[list[Hit], bool]:
        with stages.timed("retrieve"):
            found = await svc.in_store(
                "retrieve", lambda: svc.store.retrieve(collection, [photo_id], with_vectors=True)
            )
        if not found or found[0].vector is None:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
        vector = found[0].vector
        return await _search(svc, "similar", collection, vector, page, stages, photo_id), False

    hits, _, collection = await _with_live_collection(svc, stages, run)
    return _response(root, hits, collection, None, page, start)
