"""Helpers of the API tests: a real uvicorn server on a free port, an indexed store, keys."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from core.embedding.client import EmbeddingClient
from core.payload import PhotoPayload
from core.settings import Settings
from core.terms import TERMS_FIELD, photo_terms
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore, collection_name, open_store
from harness.observe import Metrics
from harness.processes import free_ports
from indexer.runtime import Runtime
from query_api.app import StartCompanion, create_app
from query_api.http.auth import hash_key
from query_api.server import server_config
from tests.support.images import encode
from tests.support.indexing import drop_keys, make_settings, variant
from tests.support.waiting import wait_until

SEARCH_KEY = "ps_test-search-key"
ADMIN_KEY = "ps_test-admin-key"
KEYS = [
    {"name": "app-search", "sha256": hash_key(SEARCH_KEY), "scopes": ["search"]},
    {"name": "ops-admin", "sha256": hash_key(ADMIN_KEY), "scopes": ["search", "admin"]},
]
PHOTOGRAPHERS = ("ana", "ben", "chen")
LICENSES = ("cc-by", "royalty-free")
TAGS = ("cat", "city", "space", "food", "people", "night")


def api_settings(
    data_dir: Path, triton_url: str, repository: Path, redis_url: str | None = None, **api: Any
) -> Settings:
    """One test's settings (`settings_for`), with the test keys configured hashed and these
    API settings."""
    # A generous cache deadline: a loaded CI machine must not turn a hit into a bypass. No
    # limit on anonymous searches, all from 127.0.0.1 here, unless a test asks for one.
    api = {"keys": KEYS, "redis_timeout_s": 2.0, "anonymous_rate_per_s": 0, **api}
    return make_settings(data_dir, triton_url, repository, redis_url=redis_url, api=api)


def ok_json(response: httpx.Response) -> dict[str, Any]:
    """A 200 answer's JSON body; any other status fails the test with the answer's text."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@dataclass(frozen=True)
class Indexed:
    """What `index_photos` wrote: ids, their metadata and the source files."""

    collection: str
    ids: list[str]
    payloads: dict[str, PhotoPayload]
    files: dict[str, Path]


def metadata_of(i: int) -> PhotoPayload:
    created = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=10 * i)
    return {
        "title": f"photo {i}",
        "tags": [TAGS[i % len(TAGS)], TAGS[(i // 2) % len(TAGS)]],
        "photographer": PHOTOGRAPHERS[i % len(PHOTOGRAPHERS)],
        "license": LICENSES[i % len(LICENSES)],
        "created_at": created.isoformat(),
        "extra": {},
    }


def index_photos(
    store: VectorStore,
    settings: Settings,
    folder: Path,
    count: int,
    *,
    model_version: int = 1,
    tag: str = "test",
) -> Indexed:
    """Embed `count` real-photo variants with Triton and write them as the live collection."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i in range(count):
        path = folder / f"photo{i:03d}.jpg"
        path.write_bytes(encode(variant(i, 160), "JPEG"))
        files[f"photo{i:03d}.jpg"] = path
    ids = list(files)
    data = [files[i].read_bytes() for i in ids]
    vectors = asyncio.run(embed_images(settings, data, model_version))
    name = collection_name(model_version, tag)
    store.create_collection(name, vectors.shape[1])
    payloads: dict[str, PhotoPayload] = {}
    for n, photo_id in enumerate(ids):
        payloads[photo_id] = {
            **metadata_of(n),
            "photo_id": photo_id,
            TERMS_FIELD: photo_terms(metadata_of(n)),
            "source_uri": files[photo_id].as_uri(),
            "source_root": folder.as_uri(),
            "content_version": f"v{n}",
            "meta_hash": "m",
            "model_version": model_version,
            "indexed_at": datetime.now(UTC).isoformat(),
        }
    store.upsert(name, [PhotoPoint(p, vectors[n], payloads[p]) for n, p in enumerate(ids)])
    store.set_aliases({LIVE_ALIAS: name})
    return Indexed(name, ids, payloads, files)


async def embed_images(settings: Settings, data: list[bytes], version: int) -> Any:
    async with EmbeddingClient(settings.triton.url, settings.repository) as client:
        return await client.encode_image_bytes(data, model_version=version)


async def embed_texts(settings: Settings, texts: list[str], version: int) -> Any:
    async with EmbeddingClient(settings.triton.url, settings.repository) as client:
        return await client.encode_texts(texts, model_version=version)


def sample(text: str, name: str, **labels: str) -> float:
    """A Prometheus sample summed over the series whose labels include `labels`."""
    return Metrics(text)(name, **labels)


def metric(metrics_url: str, name: str, **labels: str) -> float:
    """The same, read from the app's metrics listener (its internal port)."""
    return sample(httpx.get(metrics_url).text, name, **labels)


class ApiServer:
    """The real app under uvicorn, on a thread of the test process (which owns the store)."""

    def __init__(
        self,
        settings: Settings,
        store: VectorStore | None = None,
        companions: Sequence[StartCompanion] = (),
    ) -> None:
        self.port, metrics_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}"
        # Each app in this process gets its own metrics listener.
        settings = settings.model_copy(
            update={"api": settings.api.model_copy(update={"metrics_port": metrics_port})}
        )
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.settings = settings
        self.app = create_app(settings, store=store, companions=companions)
        config = server_config(
            self.app,
            settings,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="api", daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("the API did not start")
            return self.server.started

        wait_until(started, 60, "the API started")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)


@contextmanager
def serving(
    settings: Settings,
    store: VectorStore | None = None,
    *,
    companions: Sequence[StartCompanion] = (),
) -> Iterator[ApiServer]:
    with ApiServer(settings, store, companions) as server:
        yield server


@contextmanager
def own_store(settings: Settings) -> Iterator[VectorStore]:
    """The test's vector store, in its data folder; then closed, and the test's Redis keys
    (query cache, jobs, queues) dropped."""
    store = open_store(settings)
    try:
        yield store
    finally:
        store.close()
        drop_keys(settings)


@dataclass(frozen=True)
class Served:
    """An API serving an indexed store."""

    server: ApiServer
    store: VectorStore
    indexed: Indexed


@contextmanager
def indexed_store(
    settings: Settings, folder: Path, count: int
) -> Iterator[tuple[VectorStore, Indexed]]:
    """`count` photos in `folder`, indexed into the test's own store (`own_store`)."""
    with own_store(settings) as store:
        yield store, index_photos(store, settings, folder, count)


@contextmanager
def indexed_api(settings: Settings, folder: Path, count: int) -> Iterator[Served]:
    """`count` photos in `folder`, indexed into the test's own store, and the real app
    serving it."""
    with (
        indexed_store(settings, folder, count) as (store, indexed),
        serving(settings, store) as server,
    ):
        yield Served(server, store, indexed)


@contextmanager
def embedded_runtime(
    repository: Path, triton_url: str, data_dir: Path
) -> Iterator[tuple[Settings, VectorStore, Runtime]]:
    """One test's API settings (model version 1), its embedded store, and a worker's runtime
    over that store (a worker on the test's threads owns it); closed after, and the test's
    Redis keys dropped."""
    settings = api_settings(data_dir, triton_url, repository)
    settings.indexer.model_version = 1
    store = open_store(settings)
    runtime = Runtime(settings, store=store)
    try:
        yield settings, store, runtime
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)
