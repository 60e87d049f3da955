"""The embedding client against a real tritonserver: equal results, batching, typed errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from tritonclient.grpc.aio import InferenceServerClient

from model.repository import version_dir
from model.triton_server import TritonServer
from photosearch.embedding.arrays import AnyArray
from photosearch.embedding.client import EmbeddingClient
from photosearch.embedding.errors import (
    InvalidImage,
    ModelVersionUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from photosearch.embedding.images import prepare_image
from photosearch.embedding.manifest import IMAGE_MODEL, TEXT_MODEL, ModelManifest
from photosearch.embedding.tokenizer import pad_batch
from tests.conftest import free_ports
from tests.images import broken_files, encode, photo

QUERIES = ["a cat", "a red bicycle against a brick wall", "", "sunset " * 30, "Café &amp; crème 😀"]


def _ort(repository: Path, name: str, feed: dict[str, AnyArray]) -> AnyArray:
    path = version_dir(repository, name, 1) / "model.onnx"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]  # type: ignore[no-any-return]


async def test_text_embeddings_equal_onnxruntime_and_pytorch(
    client: EmbeddingClient, repository: Path, reference_clip: Any
) -> None:
    got = await client.encode_texts(QUERIES, model_version=1)
    ids = client.tokenizer(1).encode_batch(QUERIES)
    expected = _ort(repository, TEXT_MODEL, {"input_ids": pad_batch(ids, 1, 77)})
    np.testing.assert_allclose(got, expected, atol=1e-5)
    full = pad_batch(ids, multiple=77, context_length=77)
    with torch.no_grad():
        ref = reference_clip.encode_text(torch.from_numpy(full), normalize=True).numpy()
    assert (got * ref).sum(axis=1).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


async def test_image_embeddings_equal_onnxruntime(
    client: EmbeddingClient, repository: Path, manifest: ModelManifest
) -> None:
    files = [encode(photo(n), quality=90) for n in ("astronaut", "chelsea", "coffee")]
    got = await client.encode_image_bytes(files, model_version=1)
    pixels = np.stack([prepare_image(f, manifest.image) for f in files])
    np.testing.assert_allclose(got, _ort(repository, IMAGE_MODEL, {"image": pixels}), atol=1e-5)
    assert got.shape == (3, manifest.embedding_dim)


async def test_64_concurrent_single_queries_are_batched_by_triton(
    client: EmbeddingClient, triton: TritonServer
) -> None:
    queries = [f"photo number {i} of {'a very ' * (i % 7)}happy dog" for i in range(64)]
    solo = await client.encode_texts(queries[:4], model_version=1)
    stats = InferenceServerClient(triton.url)
    before = (await stats.get_inference_statistics(TEXT_MODEL, "1")).model_stats[0]
    results = await asyncio.gather(*(client.encode_texts([q], model_version=1) for q in queries))
    # Triton records statistics just after it answers: give them a moment to settle.
    for _ in range(50):
        after = (await stats.get_inference_statistics(TEXT_MODEL, "1")).model_stats[0]
        if after.inference_count - before.inference_count >= 64:
            break
        await asyncio.sleep(0.1)
    await stats.close()
    inferences = after.inference_count - before.inference_count
    executions = after.execution_count - before.execution_count
    assert inferences == 64
    assert executions < inferences, f"{executions} executions for {inferences} inferences"
    # Batched with other lengths (ragged, padded to the longest), each result is unchanged.
    np.testing.assert_allclose(np.concatenate(results[:4]), solo, atol=1e-5)


@pytest.mark.parametrize("case", sorted(broken_files()))
async def test_bad_image_bytes_raise_invalid_image(client: EmbeddingClient, case: str) -> None:
    with pytest.raises(InvalidImage):
        await client.encode_image_bytes([encode(photo()), broken_files()[case]], model_version=1)


async def test_a_version_never_exported_is_unavailable(client: EmbeddingClient) -> None:
    with pytest.raises(ModelVersionUnavailable, match="version 9"):
        await client.encode_texts(["a cat"], model_version=9)


async def test_a_deadline_too_short_raises_timeout(client: EmbeddingClient) -> None:
    with pytest.raises(TritonTimeout):
        await client.encode_texts(["a cat"], model_version=1, timeout_s=1e-4)


async def test_triton_down_raises_unavailable_after_bounded_retries(repository: Path) -> None:
    (port,) = free_ports(1)
    async with EmbeddingClient(
        f"127.0.0.1:{port}", repository, retries=2, retry_backoff_s=0.05
    ) as down:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TritonUnavailable, match="after 3 tries"):
            await down.encode_texts(["a cat"], model_version=1, timeout_s=5.0)
        assert loop.time() - started < 5.0
        assert not await down.is_ready(1)
