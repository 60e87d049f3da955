"""The async embedding client the indexer and the query API share: Triton gRPC, typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from core.embedding.arrays import AnyArray, Embeddings, Pixels
from core.embedding.errors import (
    InferenceFailed,
    ModelVersionUnavailable,
    TritonQueueFull,
    TritonQueueTimeout,
    TritonTimeout,
    TritonUnavailable,
)
from core.embedding.images import ImageLimits, prepare_image
from core.embedding.manifest import (
    IMAGE_INPUT,
    IMAGE_MODEL,
    IMAGE_OUTPUT,
    MAX_BATCH_SIZE,
    TEXT_INPUT,
    TEXT_MODEL,
    TEXT_OUTPUT,
    ModelManifest,
    Priority,
    load_manifest,
)
from core.embedding.tokenizer import TextTokenizer, load_tokenizer, pad_for
from core.settings import Settings

_TRANSIENT = ("StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED", "StatusCode.CANCELLED")
# What Triton's queue policy answers for a request still queued past its timeout (REJECT),
# and for one that finds the queue at its max_queue_size.
_QUEUE_TIMEOUT = "request timeout expired"
_QUEUE_FULL = "exceeds maximum queue size"


def _is_missing_version(exc: InferenceServerException) -> bool:
    message = str(exc.message()).lower()
    return (
        "unknown model" in message or "is not found" in message or "not at ready state" in message
    )


class EmbeddingClient:
    """Embeds texts and images through Triton's clip_text / clip_image at an explicit version.

    Every call has a deadline; transient gRPC failures are retried with exponential backoff
    within it; failures surface as the typed errors of `core.embedding.errors`.
    Tokenizing and image decoding run on a bounded thread pool, off the event loop.
    """

    def __init__(
        self,
        url: str,
        repository: Path,
        *,
        text_timeout_s: float = 2.0,
        image_timeout_s: float = 60.0,
        retries: int = 2,
        retry_backoff_s: float = 0.1,
        pad_multiple: int = 8,
        image_limits: ImageLimits | None = None,
        executor: Executor | None = None,
        priority: Priority = Priority.INDEXING,
        queue_share: float = 0.8,
    ) -> None:
        self.url = url
        self.repository = repository
        self.text_timeout_s = text_timeout_s
        self.image_timeout_s = image_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.pad_multiple = pad_multiple
        self.image_limits = image_limits or ImageLimits()
        self.priority = priority
        if not 0 < queue_share <= 1:
            raise ValueError(f"queue_share must be in (0, 1], got {queue_share}")
        self.queue_share = queue_share
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(max_workers=4, thread_name_prefix="embed")
        self._grpc = InferenceServerClient(url)
        self._manifests: dict[int, ModelManifest] = {}
        self._tokenizers: dict[int, TextTokenizer] = {}

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        executor: Executor | None = None,
        image_limits: ImageLimits | None = None,
        priority: Priority = Priority.INDEXING,
    ) -> EmbeddingClient:
        """A client configured by the PHOTOSEARCH_TRITON__* and PHOTOSEARCH_MODEL__* settings.

        Args:
            priority: the Triton priority of every request: SEARCH for the query API.
        """
        return cls(
            settings.triton.url,
            settings.repository,
            text_timeout_s=settings.triton.text_timeout_s,
            image_timeout_s=settings.triton.image_timeout_s,
            retries=settings.triton.retries,
            retry_backoff_s=settings.triton.retry_backoff_s,
            pad_multiple=settings.model.text_pad_multiple,
            image_limits=image_limits or ImageLimits.of_stored(settings.images),
            executor=executor,
            priority=priority,
            queue_share=settings.triton.queue_share,
        )

    async def close(self) -> None:
        await self._grpc.close()
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> EmbeddingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def manifest(self, version: int) -> ModelManifest:
        """Version N's manifest (image size, context length, embedding size); cached."""
        if version not in self._manifests:
            try:
                self._manifests[version] = load_manifest(self.repository, version)
            except FileNotFoundError as exc:
                raise ModelVersionUnavailable(str(exc)) from None
        return self._manifests[version]

    def tokenizer(self, version: int) -> TextTokenizer:
        """Version N's serving tokenizer; cached."""
        if version not in self._tokenizers:
            self.manifest(version)
            self._tokenizers[version] = load_tokenizer(self.repository, version)
        return self._tokenizers[version]

    async def load_tokenizer(self, version: int) -> TextTokenizer:
        """`tokenizer(version)`, read from disk on the thread pool the first time (tens of
        milliseconds that would otherwise stall an event loop)."""
        if version in self._tokenizers:
            return self._tokenizers[version]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.tokenizer, version)

    async def tokenize(self, texts: Sequence[str], *, model_version: int) -> list[list[int]]:
        """Token ids for each text, computed on the thread pool."""
        tokenizer = self.tokenizer(model_version)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, tokenizer.encode_batch, list(texts))

    async def encode_token_ids(
        self, ids: Sequence[Sequence[int]], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings:
        """float32 [len(ids), D] L2-normalized text embeddings.

        Args:
            ids: token ids per text, as `tokenize` returns them.
            model_version: the Triton model version; it must match the collection searched.
            timeout_s: the deadline of the whole call, retries included.
        """
        if not ids:
            return np.zeros((0, self.manifest(model_version).embedding_dim), dtype=np.float32)
        # A fixed-length (bidirectional) text model always gets its whole context.
        spec = self.manifest(model_version).tokenizer
        out = []
        for start in range(0, len(ids), MAX_BATCH_SIZE):
            batch = pad_for(spec, ids[start : start + MAX_BATCH_SIZE], self.pad_multiple)
            out.append(
                await self._infer(
                    TEXT_MODEL,
                    TEXT_INPUT,
                    TEXT_OUTPUT,
                    batch,
                    "INT64",
                    model_version,
                    timeout_s or self.text_timeout_s,
                )
            )
        return np.concatenate(out)

    async def encode_texts(
        self, texts: Sequence[str], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings:
        """float32 [len(texts), D] L2-normalized embeddings of the texts."""
        ids = await self.tokenize(texts, model_version=model_version)
        return await self.encode_token_ids(ids, model_version=model_version, timeout_s=timeout_s)

    async def prepare_images(self, data: Sequence[bytes], *, model_version: int) -> list[Pixels]:
        """Decode and preprocess on the thread pool; the first bad image raises InvalidImage."""
        spec = self.manifest(model_version).image
        loop = asyncio.get_running_loop()
        work = partial(prepare_image, spec=spec, limits=self.image_limits)
        return list(
            await asyncio.gather(*(loop.run_in_executor(self._executor, work, d) for d in data))
        )

    async def encode_images(
        self,
        pixels: Sequence[Pixels] | Pixels,
        *,
        model_version: int,
        timeout_s: float | None = None,
        chunk: int = MAX_BATCH_SIZE,
    ) -> Embeddings:
        """float32 [N, D] L2-normalized embeddings of preprocessed uint8 [S, S, 3] images.

        Args:
            pixels: the images, as `prepare_images` returns them.
            model_version: the Triton model version; it must match the collection written.
            timeout_s: the deadline of each Triton request (one per chunk), retries included.
            chunk: images per Triton request (at most 64), sent one after the other. On a CPU
                target a search waits for the request that is running: smaller chunks
                bound that wait.
        """
        if not 1 <= chunk <= MAX_BATCH_SIZE:
            raise ValueError(f"chunk must be 1..{MAX_BATCH_SIZE}, got {chunk}")
        size = self.manifest(model_version).image.size
        batch = np.ascontiguousarray(
            np.stack(list(pixels)) if not isinstance(pixels, np.ndarray) else pixels
        )
        if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[1:] != (size, size, 3):
            raise ValueError(
                f"expected uint8 [N, {size}, {size}, 3] pixels, got {batch.dtype} {batch.shape}"
            )
        out = [
            await self._infer(
                IMAGE_MODEL,
                IMAGE_INPUT,
                IMAGE_OUTPUT,
                batch[start : start + chunk],
                "UINT8",
                model_version,
                timeout_s or self.image_timeout_s,
            )
            for start in range(0, len(batch), chunk)
        ]
        return np.concatenate(out)

    async def encode_image_bytes(
        self, data: Sequence[bytes], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings:
        """Decode, preprocess and embed encoded images (JPEG, PNG, WebP, GIF, TIFF, ...)."""
        pixels = await self.prepare_images(data, model_version=model_version)
        return await self.encode_images(pixels, model_version=model_version, timeout_s=timeout_s)

    async def is_ready(self, model_version: int) -> bool:
        """Both models of this version are loaded and ready in Triton."""
        try:
            return all(
                [
                    await self._grpc.is_model_ready(name, str(model_version), client_timeout=2.0)
                    for name in (IMAGE_MODEL, TEXT_MODEL)
                ]
            )
        except InferenceServerException:
            return False

    async def _infer(
        self,
        model: str,
        input_name: str,
        output_name: str,
        array: AnyArray,
        datatype: str,
        version: int,
        timeout_s: float,
    ) -> Embeddings:
        self.manifest(version)  # a version that was never exported fails before the network
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        tensor = InferInput(input_name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        wanted = [InferRequestedOutput(output_name)]
        attempt = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TritonTimeout(f"{model} v{version}: no answer within {timeout_s:.3g} s")
            try:
                result = await self._grpc.infer(
                    model,
                    [tensor],
                    model_version=str(version),
                    outputs=wanted,
                    priority=int(self.priority),
                    # Triton drops the request if it is still queued when only the rest of
                    # the deadline is left: computing it then would serve nobody, and the
                    # caller hears "overloaded" before its own deadline passes.
                    timeout=max(1, int(remaining * self.queue_share * 1e6)),
                    client_timeout=remaining,
                )
            except InferenceServerException as exc:
                status = str(exc.status())
                if _QUEUE_TIMEOUT in str(exc.message()).lower():
                    raise TritonQueueTimeout(
                        f"{model} v{version}: still queued in Triton after "
                        f"{self.queue_share:.0%} of its {timeout_s:.3g} s deadline: overloaded"
                    ) from None
                if _QUEUE_FULL in str(exc.message()).lower():
                    raise TritonQueueFull(
                        f"{model} v{version}: Triton's queue is full: overloaded"
                    ) from None
                if status == "StatusCode.DEADLINE_EXCEEDED":
                    raise TritonTimeout(
                        f"{model} v{version}: no answer within {timeout_s:.3g} s"
                    ) from None
                if _is_missing_version(exc):
                    raise ModelVersionUnavailable(
                        f"{model} v{version} is not loaded: {exc.message()}"
                    ) from None
                if status not in _TRANSIENT:
                    raise InferenceFailed(f"{model} v{version}: {exc.message()}") from None
                if attempt >= self.retries:
                    raise TritonUnavailable(
                        f"Triton at {self.url} unavailable after {attempt + 1} tries: "
                        f"{exc.message()}"
                    ) from None
                delay = min(self.retry_backoff_s * 2**attempt, max(deadline - loop.time(), 0))
                attempt += 1
                await asyncio.sleep(delay)
                continue
            embeddings = result.as_numpy(output_name)
            if embeddings is None or embeddings.shape[0] != array.shape[0]:
                raise InferenceFailed(f"{model} v{version} returned no {output_name} for the batch")
            return embeddings  # type: ignore[no-any-return]
