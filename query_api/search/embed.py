"""A query's embedding: a text's from the cache, else Triton, one call per distinct text query in
flight; an image's decoded on the image threads, then Triton, never cached."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.errors import EmbeddingError
from core.embedding.images import ImageLimits, prepare_image
from core.embedding.manifest import ModelManifest, SearchCalibration
from core.querycache import QueryCache
from query_api.http.admission import Admission
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.images.work import ImageWork


class Tokenizer(Protocol):
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...


class TextEncoder(Protocol):
    """What embedding a text query takes of the embedding client."""

    def manifest(self, version: int) -> ModelManifest: ...

    async def load_tokenizer(self, version: int) -> Tokenizer: ...

    async def encode_token_ids(
        self, ids: Sequence[Sequence[int]], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings: ...


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


async def timed_embed(
    metrics: Metrics, model: str, call: Callable[[], Awaitable[Embeddings]]
) -> Embeddings:
    """One embedding call, counted in the Triton metrics of `model` (text or image)."""
    start = time.perf_counter()
    try:
        return await call()
    except EmbeddingError as exc:
        metrics.triton_errors.labels(model, type(exc).__name__).inc()
        raise
    finally:
        metrics.triton_seconds.labels(model).observe(time.perf_counter() - start)


@dataclass(eq=False)
class QueryEmbedder:
    """Text queries' embeddings at a model version, cached; concurrent misses of one query
    share one Triton call.

    `later` runs a cache write off the answer's path (it keeps its own deadline and never
    raises).
    """

    encoder: TextEncoder
    cache: QueryCache
    admission: Admission
    metrics: Metrics
    _: KW_ONLY
    timeout_s: float
    later: Callable[[Coroutine[Any, Any, None]], None]
    inflight: dict[tuple[int, str], asyncio.Future[Embeddings]] = field(
        default_factory=dict, init=False
    )

    def calibration(self, version: int) -> SearchCalibration | None:
        """The search's calibration for this model version's embeddings (its manifest's,
        `photosearch model calibrate`); none: the defaults."""
        return self.encoder.manifest(version).calibration

    async def embed(self, normalized: str, version: int, stages: Stages) -> tuple[Embeddings, bool]:
        """The query's embedding at this model version and whether it came from the cache.

        One Redis round trip reads the cache and counts the query (the pre-warm's popularity);
        on a miss the query takes an admission slot, then is tokenized here and embedded by
        Triton; the cache is filled after the answer, off its path.
        """
        with stages.timed("cache"):
            vector, outcome = await self.cache.get_and_count(version, normalized)
        self.metrics.cache.labels(outcome).inc()
        if vector is not None:
            return vector, True
        key = (version, normalized)
        shared = self.inflight.get(key)
        if shared is not None:  # the same query is already being embedded: wait for that call
            with stages.timed("embed"):
                return await asyncio.shield(shared), False
        future: asyncio.Future[Embeddings] = asyncio.get_running_loop().create_future()
        self.inflight[key] = future
        try:
            async with self.admission.slot("text", stages):
                vector = await self._embed_text(normalized, version, stages)
            future.set_result(vector)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a future nobody else awaited does not warn
            raise
        finally:
            del self.inflight[key]
        self.later(self.cache.put(version, normalized, vector))
        return vector, False

    async def _embed_text(self, normalized: str, version: int, stages: Stages) -> Embeddings:
        encoder = self.encoder
        with stages.timed("tokenize"):
            tokenizer = await encoder.load_tokenizer(version)
            # A query is a few dozen characters: tokenizing it here (tens of microseconds)
            # costs less than the hop to a thread and back.
            ids = tokenizer.encode_batch([normalized])
        with stages.timed("embed"):
            embeddings = await timed_embed(
                self.metrics,
                "text",
                lambda: encoder.encode_token_ids(
                    ids, model_version=version, timeout_s=self.timeout_s
                ),
            )
        vector: Embeddings = embeddings[0]
        return vector


@dataclass(frozen=True)
class ImageEmbedder:
    """Image queries' embeddings at a model version: decoded on the image threads (inside
    their memory budget), then embedded by Triton within `timeout_s`; one admission slot for
    both. Never cached."""

    encoder: ImageEncoder
    admission: Admission
    images: ImageWork
    metrics: Metrics
    _: KW_ONLY
    timeout_s: float

    async def embed(self, data: bytes, version: int, stages: Stages) -> Embeddings:
        """The embedding of the encoded image `data` at this model version."""
        encoder = self.encoder
        spec = encoder.manifest(version).image
        limits = encoder.image_limits
        async with self.admission.slot("image", stages):
            with stages.timed("decode"):
                pixels = await self.images.run(
                    lambda reserve: prepare_image(data, spec, limits, reserve)
                )
            with stages.timed("embed"):
                vectors = await timed_embed(
                    self.metrics,
                    "image",
                    lambda: encoder.encode_images(
                        [pixels], model_version=version, timeout_s=self.timeout_s
                    ),
                )
        vector: Embeddings = vectors[0]
        return vector
