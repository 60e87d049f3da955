"""The parts a search takes, real but for the text encoder: Qdrant Edge in-process under a
temporary folder, the query cache over the session's Redis, and a text encoder of fixed
vectors (Triton cannot run in a unit test)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from redis.asyncio import Redis as AsyncRedis

from core.embedding.arrays import Embeddings
from core.embedding.manifest import ModelManifest, SearchCalibration, write_manifest
from core.payload import PhotoPayload
from core.querycache import QueryCache
from core.settings import RedisSettings, Settings
from core.settings_api import ApiKey, ApiSettings
from core.vectorstore import GROUP_FIELD, LIVE_ALIAS, PhotoPoint, VectorStore, collection_name
from query_api.app import services_lifespan
from query_api.http.admission import Admission
from query_api.http.errors import install_handlers
from query_api.http.metrics import Metrics, MetricsMiddleware
from query_api.search.embed import QueryEmbedder
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection, StoreCalls
from tests.support.models import stand_in_manifest
from tests.support.redisserver import session_url
from tests.support.stores import engine_store

DIM = 4
LIVE = collection_name(1, "a")
# A ceiling that only bounds a hang: no test here waits on the store or Redis for long.
DEADLINE_S = 30.0


def unit(*values: float) -> Embeddings:
    vector = np.asarray(values, dtype=np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


# What the stand-in encoder answers: each query's direction in a 4-dimensional space.
QUERIES = {
    "a cat": unit(1, 0, 0, 0),
    "a dog": unit(0, 1, 0, 0),
    "a kitten": unit(1, 0, 0.2, 0),
}
# The photos of the live collection: two cats (one closer to "a cat"), a dog, a boat.
PHOTOS = {
    "cat-1": unit(1, 0, 0.05, 0),
    "cat-2": unit(1, 0.1, 0.4, 0),
    "dog-1": unit(0.1, 1, 0, 0),
    "boat-1": unit(0, 0, 0, 1),
}


class WordIds:
    """Each known query is one token: its index."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [[self.texts.index(text)] for text in texts]


@dataclass
class FixedEncoder:
    """Triton's text encoder stood in for: the fixed vector of each query of QUERIES.

    `gate`, when set, holds every call until the test opens it; `calls` records the texts.
    """

    vectors: dict[str, Embeddings] = field(default_factory=lambda: dict(QUERIES))
    calls: list[list[str]] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event | None = None

    calibrations: dict[int, SearchCalibration] = field(default_factory=dict)

    def manifest(self, version: int) -> ModelManifest:
        manifest = stand_in_manifest(version, DIM)
        manifest.calibration = self.calibrations.get(version)
        return manifest

    async def load_tokenizer(self, version: int) -> WordIds:
        return WordIds(list(self.vectors))

    async def encode_token_ids(
        self, ids: Sequence[Sequence[int]], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings:
        texts = [list(self.vectors)[i[0]] for i in ids]
        self.calls.append(texts)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        return np.stack([self.vectors[t] for t in texts])


def write_photos(store: VectorStore, collection: str, photos: dict[str, Embeddings]) -> None:
    store.upsert(
        collection,
        [
            PhotoPoint(pid, vector, {"title": pid.replace("-", " "), "tags": [pid.split("-")[0]]})
            for pid, vector in photos.items()
        ],
    )


def live_store(folder: Path) -> VectorStore:
    """Qdrant Edge with the live collection holding PHOTOS."""
    edge = engine_store("edge", folder, (LIVE,), DIM)
    edge.ensure_indexes(LIVE)
    write_photos(edge, LIVE, PHOTOS)
    edge.set_aliases({LIVE_ALIAS: LIVE})
    return edge


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VectorStore]:
    """One store for a module's tests that only read it (a store takes a second to open)."""
    edge = live_store(tmp_path_factory.mktemp("store"))
    try:
        yield edge
    finally:
        edge.close()


@pytest.fixture(scope="module")
def grouped_store(shared_store: VectorStore) -> VectorStore:
    """The module's store with the two cats as one near-duplicate group (a burst of one
    scene)."""
    cats: PhotoPayload = {GROUP_FIELD: "cats"}
    shared_store.set_payloads(LIVE, {"cat-1": cats, "cat-2": cats})
    return shared_store


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[VectorStore]:
    """A store of the test's own, for a test that changes it."""
    edge = live_store(tmp_path)
    try:
        yield edge
    finally:
        edge.close()


@pytest.fixture
def store(shared_store: VectorStore) -> VectorStore:
    return shared_store


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def calls(store: VectorStore, metrics: Metrics) -> Iterator[StoreCalls]:
    with ThreadPoolExecutor(2, thread_name_prefix="store") as pool:
        yield StoreCalls(store, pool, timeout_s=DEADLINE_S, retry_after_s=7, metrics=metrics)


@pytest.fixture
def reranking() -> Iterator[Reranking]:
    """Re-ranking on one thread, from a pool of 50 candidates at least."""
    rerank = Reranking(1, pool=50, diversity_window=1000, timeout_s=DEADLINE_S, retry_after_s=7)
    try:
        yield rerank
    finally:
        rerank.close()


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def live(calls: StoreCalls, clock: Clock) -> LiveCollection:
    return LiveCollection(calls, alias_cache_s=5.0, now=clock)


@pytest.fixture
def own_live(own_store: VectorStore, metrics: Metrics, clock: Clock) -> Iterator[LiveCollection]:
    """The live collection of the test's own store (its calls are `own_live.calls`)."""
    with ThreadPoolExecutor(1, thread_name_prefix="store") as pool:
        calls = StoreCalls(own_store, pool, timeout_s=DEADLINE_S, retry_after_s=7, metrics=metrics)
        yield LiveCollection(calls, alias_cache_s=5.0, now=clock)


@pytest.fixture
async def cache(redis_url: str) -> AsyncIterator[QueryCache]:
    """The query cache over the session's Redis, under a prefix of this test's own."""
    redis = AsyncRedis.from_url(redis_url)
    try:
        yield QueryCache(
            redis,
            f"test-{uuid.uuid4().hex}",
            ttl_s=60,
            timeout_s=DEADLINE_S,
            retry_s=1.0,
            popular_days=1,
        )
    finally:
        await redis.aclose()


@pytest.fixture
def encoder() -> FixedEncoder:
    return FixedEncoder()


@dataclass
class Later:
    """The writes a search leaves for after its answer, run when the test says."""

    pending: list[asyncio.Task[None]] = field(default_factory=list)

    def __call__(self, work: Coroutine[Any, Any, None]) -> None:
        self.pending.append(asyncio.ensure_future(work))

    async def finish(self) -> None:
        await asyncio.gather(*self.pending)
        self.pending.clear()


@pytest.fixture
def later() -> Later:
    return Later()


@pytest.fixture
def queries(
    encoder: FixedEncoder, cache: QueryCache, metrics: Metrics, later: Later
) -> QueryEmbedder:
    return QueryEmbedder(
        encoder,
        cache,
        Admission(4, DEADLINE_S, 1),
        metrics,
        timeout_s=DEADLINE_S,
        later=later,
    )


def api_settings(folder: Path, *, anonymous: bool = True, keys: Sequence[ApiKey] = ()) -> Settings:
    """Settings of an API over the session's Redis under a prefix of its own, and a model
    repository holding version 1's manifest (as wide as the store's vectors)."""
    settings = Settings(
        data_dir=folder,
        # The session's Redis: RedisSettings built here reads no environment, and its default
        # URL is a Redis on this machine that a fresh one lacks.
        redis=RedisSettings(url=session_url(), prefix=f"unit-{uuid.uuid4().hex}"),
        api=ApiSettings(anonymous_search=anonymous, metrics_port=0, keys=tuple(keys)),
    )
    settings.repository.mkdir(parents=True, exist_ok=True)
    manifest = stand_in_manifest(1, DIM, arch="ViT-B-32", weights="/models/laion2b.pt")
    write_manifest(settings.repository, manifest)
    return settings


def key_of(name: str, secret: str, *scopes: str) -> ApiKey:
    digest = hashlib.sha256(secret.encode()).hexdigest()
    return ApiKey.model_validate({"name": name, "sha256": digest, "scopes": scopes or ("search",)})


def router_app(settings: Settings, store: VectorStore, *routers: APIRouter) -> FastAPI:
    """An app of only these routers over the replica's Services (opened in query_api.app's
    lifespan), with the error handlers and the request timing they rely on."""
    metrics = Metrics()
    app = FastAPI(lifespan=services_lifespan(settings, store, metrics))
    install_handlers(app, settings.api.retry_after_s, settings.api.overload_retry_after_s)
    for router in routers:
        app.include_router(router)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


def router_client(
    store: VectorStore, folder: Path, *routers: APIRouter, keys: Sequence[ApiKey] = ()
) -> Iterator[TestClient]:
    """A client of `router_app` (its lifespan run) over the store, for a module's fixture to
    yield from."""
    with TestClient(router_app(api_settings(folder, keys=keys), store, *routers)) as client:
        yield client


def result_ids(answer: dict[str, Any]) -> list[str]:
    return [result["id"] for result in answer["results"]]
