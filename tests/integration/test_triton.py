"""The embedding client against a real tritonserver: equal results, batching, typed errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import tritonclient.grpc as grpcclient
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from core.embedding.arrays import AnyArray
from core.embedding.client import EmbeddingClient
from core.embedding.errors import (
    InvalidImage,
    ModelVersionUnavailable,
    TritonQueueFull,
    TritonQueueTimeout,
    TritonTimeout,
    TritonUnavailable,
)
from core.embedding.images import prepare_image
from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL, ModelManifest, Priority
from core.embedding.tokenizer import pad_batch
from harness.processes import free_ports
from model.repository import version_dir
from model.triton_server import (
    CONTROL_HEADER,
    GRPC_CONTROL_HEADER,
    TritonServer,
    grpc_control_headers,
    write_control_key,
)
from query_api.http.errors import install_handlers
from tests.support.gated import Gated, gated_triton
from tests.support.images import broken_files, encode, photo
from tests.support.models import TRITON_CONTROL_KEY
from tests.support.waiting import await_until

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

    # Triton records statistics just after it answers: until they count all 64.
    async def counted() -> Any:
        now = (await stats.get_inference_statistics(TEXT_MODEL, "1")).model_stats[0]
        return now if now.inference_count - before.inference_count >= 64 else None

    after = await await_until(counted, 60, "Triton's statistics counting the 64 inferences")
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
        # Three tries within the deadline, each refused: not a wait for the deadline, which
        # would end in TritonTimeout.
        with pytest.raises(TritonUnavailable, match="after 3 tries"):
            await down.encode_texts(["a cat"], model_version=1, timeout_s=5.0)
        assert not await down.is_ready(1)


# -- model control: only the key's holder loads or unloads ---------------------------------


def _control(triton: TritonServer, action: str, headers: dict[str, str]) -> int:
    """POST /v2/repository/models/clip_text/<action>: Triton's HTTP status."""
    url = f"http://127.0.0.1:{triton.ports.http}/v2/repository/models/{TEXT_MODEL}/{action}"
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code


async def test_unloading_without_the_control_key_is_refused_and_searches_go_on(
    triton: TritonServer, client: EmbeddingClient
) -> None:
    before = await client.encode_texts(["a cat"], model_version=1)
    # No key, a wrong key, the right key under gRPC's header name: all refused over HTTP.
    for headers in ({}, {CONTROL_HEADER: "not-the-key"}, {GRPC_CONTROL_HEADER: TRITON_CONTROL_KEY}):
        assert _control(triton, "unload", headers) == 403, headers
    grpc = grpcclient.InferenceServerClient(triton.url)
    try:
        for grpc_headers in (
            None,
            grpc_control_headers("not-the-key"),
            {CONTROL_HEADER: TRITON_CONTROL_KEY},
        ):
            with pytest.raises(InferenceServerException, match="restricted"):
                grpc.unload_model(TEXT_MODEL, headers=grpc_headers)
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.get_model_repository_index()
        assert grpc.is_model_ready(TEXT_MODEL, "1") and grpc.is_model_ready(IMAGE_MODEL, "1")
    finally:
        grpc.close()
    # Inference needs no key: the API and the workers hold none.
    after = await client.encode_texts(["a cat"], model_version=1)
    np.testing.assert_allclose(after, before, atol=1e-6)


def test_triton_load_sends_the_control_key_from_the_setting_or_the_key_file(
    triton: TritonServer, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    env["PHOTOSEARCH_DATA_DIR"] = str(tmp_path)
    command = [sys.executable, "-m", "photosearch", "triton", "load", "--url", triton.url]

    def load(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env={**env, **extra}, capture_output=True, text=True, timeout=120
        )

    refused = load()
    assert refused.returncode == 1, refused.stdout
    assert "restricted" in refused.stderr and "PHOTOSEARCH_TRITON__CONTROL_KEY" in refused.stderr
    loaded = load(PHOTOSEARCH_TRITON__CONTROL_KEY=TRITON_CONTROL_KEY)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.splitlines() == ["clip_image: loaded", "clip_text: loaded"]
    # What `photosearch triton serve` leaves under DATA_DIR/triton when the setting is unset.
    write_control_key(tmp_path / "triton", TRITON_CONTROL_KEY)
    from_file = load()
    assert from_file.returncode == 0, from_file.stderr
    # Over HTTP the same key, under its own header name.
    assert _control(triton, "load", {CONTROL_HEADER: TRITON_CONTROL_KEY}) == 200
    grpc = grpcclient.InferenceServerClient(triton.url)
    try:
        assert grpc.is_model_ready(TEXT_MODEL, "1") and grpc.is_model_ready(IMAGE_MODEL, "1")
    finally:
        grpc.close()


def _http(triton: TritonServer, path: str, body: bytes | None, headers: dict[str, str]) -> int:
    """A request to Triton's HTTP API (POST with a body, else GET): its status."""
    url = f"http://127.0.0.1:{triton.ports.http}{path}"
    method = "GET" if body is None else "POST"
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code


# Settings that leave the server as it runs (verbose logging off, no trace): the test can
# apply them for real without changing what the other tests see.
_SETTINGS = {
    "/v2/logging": b'{"log_verbose_level": 0}',
    "/v2/trace/setting": b'{"trace_level": ["OFF"]}',
}


def test_log_trace_and_shared_memory_settings_demand_the_control_key(
    triton: TritonServer,
) -> None:
    """Found by a tester (issue 33, F10): these changed the server for anyone on its ports."""
    key = {CONTROL_HEADER: TRITON_CONTROL_KEY}
    for path, body in _SETTINGS.items():
        for headers in ({}, {CONTROL_HEADER: "not-the-key"}):
            assert _http(triton, path, body, headers) == 403, (path, headers)
            assert _http(triton, path, None, headers) == 403, (path, headers)
        assert _http(triton, path, body, key) == 200, path
    assert _http(triton, "/v2/systemsharedmemory/status", None, {}) == 403
    assert _http(triton, "/v2/systemsharedmemory/unregister", b"", {}) == 403
    assert _http(triton, "/v2/systemsharedmemory/status", None, key) == 200
    # Over gRPC as well; health, metadata and statistics stay open to the API's client.
    grpc = grpcclient.InferenceServerClient(triton.url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.update_log_settings({"log_verbose_level": 0})
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.update_trace_settings(settings={"trace_level": ["OFF"]})
        grpc.update_log_settings(
            {"log_verbose_level": 0}, headers=grpc_control_headers(TRITON_CONTROL_KEY)
        )
        assert grpc.is_server_ready() and grpc.get_inference_statistics(TEXT_MODEL)
    finally:
        grpc.close()
    assert _http(triton, "/v2/health/ready", None, {}) == 200


# -- scheduling: searches ahead of indexing, deadlines kept in Triton's queue ---------------


@pytest.fixture(scope="module")
def gated(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gated]:
    with gated_triton(repository, tmp_path_factory.mktemp("gated")) as server:
        yield server


def _tagged(manifest: ModelManifest, tag: int, count: int) -> AnyArray:
    size = manifest.image.size
    return np.full((count, size, size, 3), tag, dtype=np.uint8)


async def _until(check: Callable[[], bool], what: str) -> None:
    async def checked() -> bool:
        return check()

    await await_until(checked, 60, what)


async def test_a_search_is_served_before_indexing_chunks_queued_ahead_of_it(
    gated: Gated, repository: Path, manifest: ModelManifest
) -> None:
    url = gated.server.url
    async with (
        EmbeddingClient(url, repository, priority=Priority.INDEXING) as indexer,
        EmbeddingClient(url, repository, priority=Priority.SEARCH) as api,
    ):
        gated.gate.touch()
        seen = len(gated.executions())
        running = asyncio.ensure_future(
            indexer.encode_images(_tagged(manifest, 1, 8), model_version=1)
        )
        await _until(lambda: len(gated.executions()) > seen, "the first chunk running")
        # The indexer's next chunks queue behind the one running, then a search arrives.
        chunks = [
            asyncio.ensure_future(indexer.encode_images(_tagged(manifest, t, 8), model_version=1))
            for t in (10, 11, 12, 13)
        ]
        await _until(lambda: gated.pending() >= 4, "four chunks queued")
        search = asyncio.ensure_future(
            api.encode_images(_tagged(manifest, 99, 1), model_version=1, timeout_s=30)
        )
        await _until(lambda: gated.pending() >= 5, "the search queued")
        gated.gate.unlink()
        found = await search
        results = await asyncio.gather(running, *chunks)
    order = [tag for execution in gated.executions()[seen:] for tag in execution]
    # Arrival order was 1, 10, 11, 12, 13, 99; the search went first after the running chunk.
    assert order[0] == 1 and order[1] == 99, order
    assert sorted(order[2:]) == [10, 11, 12, 13]
    pixels = _tagged(manifest, 99, 1)
    np.testing.assert_allclose(found, _ort(repository, IMAGE_MODEL, {"image": pixels}), atol=1e-5)
    assert [r.shape[0] for r in results] == [8, 8, 8, 8, 8]


async def test_a_request_still_queued_at_its_deadline_is_rejected_not_computed(
    gated: Gated, repository: Path, manifest: ModelManifest
) -> None:
    url = gated.server.url
    # Triton is told to wait at most 1e-5 of the 30 s deadline (300 us) in its queue, so its
    # rejection arrives while the client still waits: what the client hears is Triton's.
    async with (
        EmbeddingClient(url, repository, priority=Priority.INDEXING) as indexer,
        EmbeddingClient(url, repository, priority=Priority.SEARCH, queue_share=1e-5) as api,
    ):
        gated.gate.touch()
        seen = len(gated.executions())
        running = asyncio.ensure_future(
            indexer.encode_images(_tagged(manifest, 2, 1), model_version=1)
        )
        await _until(lambda: len(gated.executions()) > seen, "a batch running")
        late = asyncio.ensure_future(
            api.encode_images(_tagged(manifest, 77, 1), model_version=1, timeout_s=30)
        )
        await _until(lambda: gated.pending() >= 1, "the search queued")
        after = asyncio.ensure_future(
            indexer.encode_images(_tagged(manifest, 3, 1), model_version=1)
        )
        # Seen queued behind the search (a request and a read of Triton's metrics later), the
        # search has been held in the queue past its 300 us for sure.
        await _until(lambda: gated.pending() >= 2, "a batch queued after it")
        gated.gate.unlink()
        with pytest.raises(TritonQueueTimeout, match="overloaded"):
            await late
        await asyncio.gather(running, after)
    tags = [tag for execution in gated.executions()[seen:] for tag in execution]
    assert tags == [2, 3]  # the late search never reached the model; the rest went on


def test_the_api_answers_a_queue_rejection_with_503_and_retry_after() -> None:
    app = FastAPI()
    install_handlers(app, retry_after_s=7, overload_retry_after_s=2)

    @app.get("/search")
    async def search() -> None:
        raise TritonQueueTimeout("clip_text v1: still queued in Triton: overloaded")

    @app.get("/full")
    async def full() -> None:
        raise TritonQueueFull("clip_text v1: Triton's queue is full: overloaded")

    for path in ("/search", "/full"):
        answer = TestClient(app).get(path)
        assert answer.status_code == 503
        # An overload clears in about a second, unlike a dependency that is down.
        assert answer.headers["Retry-After"] == "2"
        assert answer.json()["error"] == "overloaded"
        assert "overloaded" in answer.json()["message"]
