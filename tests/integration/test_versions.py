"""A new model version loads into a running Triton while the old one keeps answering."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from pathlib import Path

import numpy as np
from tritonclient.grpc.aio import InferenceServerClient

from core.embedding.client import EmbeddingClient
from core.embedding.errors import EmbeddingError, ModelVersionUnavailable
from harness.processes import triton_ports
from model.export import export_model
from model.triton_server import TritonServer
from tests.support.models import TINY_CONFIG
from tests.support.waiting import await_until


async def test_version_2_loads_while_version_1_keeps_serving(
    repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(repository, repo)
    with TritonServer(repo, triton_ports(), tmp_path / "triton") as server:
        async with EmbeddingClient(server.url, repo, text_timeout_s=30) as client:
            before = await client.encode_texts(["a cat"], model_version=1)
            with_no_v2 = None
            try:
                await client.encode_texts(["a cat"], model_version=2)
            except ModelVersionUnavailable as exc:
                with_no_v2 = exc
            assert with_no_v2 is not None

            outcomes: list[str] = []
            stop = asyncio.Event()

            async def keep_searching() -> None:
                while not stop.is_set():
                    try:
                        got = await client.encode_texts(["a cat"], model_version=1)
                        ok = np.allclose(got, before, atol=1e-5)
                        outcomes.append("ok" if ok else "changed")
                    except EmbeddingError as exc:
                        outcomes.append(f"failed: {exc}")
                    with contextlib.suppress(TimeoutError):  # a steady pace until stopped
                        await asyncio.wait_for(stop.wait(), 0.02)

            searching = asyncio.create_task(keep_searching())
            await asyncio.to_thread(export_model, str(TINY_CONFIG), "none", repo)
            load = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "photosearch",
                "triton",
                "load",
                "--url",
                server.url,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            output, _ = await load.communicate()
            assert load.returncode == 0, output.decode()
            loaded = len(outcomes)

            async def searched_on() -> bool:  # searches keep running across the switch
                return len(outcomes) >= loaded + 10

            await await_until(searched_on, 60, lambda: f"searches after the load: {outcomes}")
            stop.set()
            await searching

            assert outcomes and set(outcomes) == {"ok"}, sorted(set(outcomes))
            after_v1 = await client.encode_texts(["a cat"], model_version=1)
            v2 = await client.encode_texts(["a cat"], model_version=2)
            np.testing.assert_allclose(after_v1, before, atol=1e-5)
            assert float((v2 * before).sum()) < 0.99  # other weights, other embedding
            assert await client.is_ready(1) and await client.is_ready(2)

        index = InferenceServerClient(server.url)
        ready = {
            (m.name, m.version)
            for m in (await index.get_model_repository_index()).models
            if m.state == "READY"
        }
        await index.close()
        assert ready == {(n, v) for n in ("clip_image", "clip_text") for v in ("1", "2")}
