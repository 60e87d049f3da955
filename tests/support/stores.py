"""The two engines a store-level test runs on: Qdrant Edge in-process, and qdrant-client's
local mode (the server's API, answered in Python); and a collection made before keywords."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from core.embedding.arrays import Embeddings
from core.settings import QdrantSettings, Settings
from core.vectorstore import VECTOR_NAME, PhotoPoint, VectorStore, open_store
from core.vectorstore.base import SearchTuning
from core.vectorstore.edge import EdgeStore
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.schema import CollectionSchema
from tests.support.qdrant_server import clear

ENGINES = ["edge", "qdrant-local"]
# The stores a search feature's store-level test runs on: both engines in-process, and a
# Qdrant server's REST API (the stand-in over local mode, tests/support/qdrant_server.py).
STORES = [*ENGINES, "qdrant-http"]


def as_stored(store: object, vector: Sequence[float] | Embeddings) -> Embeddings:
    """The unit vector a store gives back for `vector`: Qdrant Edge keeps the originals as
    float16 (core/vectorstore/schema.py); local mode keeps float32, whatever it is asked."""
    unit = np.asarray(vector, dtype=np.float32)
    unit = unit / np.linalg.norm(unit)
    kept = unit.astype(np.float16) if isinstance(store, EdgeStore) else unit
    return np.asarray(kept, dtype=np.float32)


def engine_store(engine: str, folder: Path, collections: tuple[str, ...], dim: int) -> VectorStore:
    """A store of that engine in the folder, with the collections created."""
    store: VectorStore
    if engine == "edge":
        store = EdgeStore(
            folder / "vectors",
            schema=CollectionSchema(hnsw_ef_construct=64, quantizer=None),
            tuning=SearchTuning(hnsw_ef=64),
        )
    else:
        store = open_store(Settings(data_dir=folder, qdrant=QdrantSettings(url=":memory:")))
    for name in collections:
        store.create_collection(name, dim)
    return store


def any_store(
    kind: str, folder: Path, collection: str, dim: int, url: Callable[[], str]
) -> VectorStore:
    """A store of one of STORES with the collection created; `url` gives the stand-in's
    address (asked for qdrant-http only), whose collections are dropped first."""
    if kind != "qdrant-http":
        return engine_store(kind, folder, (collection,), dim)
    address = url()
    clear(address)
    store = open_store(Settings(data_dir=folder, qdrant=QdrantSettings(url=address)))
    store.create_collection(collection, dim)
    return store


@contextmanager
def engine_holding(
    engine: str, folder: Path, collection: str, dim: int, points: Sequence[PhotoPoint]
) -> Iterator[VectorStore]:
    """A store of that engine whose one collection holds the points; closed after."""
    store = engine_store(engine, folder, (collection,), dim)
    try:
        store.upsert(collection, points)
        yield store
    finally:
        store.close()


def store_without_keywords(collection: str, dim: int) -> QdrantStore:
    """qdrant-client's local mode with a collection made before keywords existed: its dense
    vector and no sparse one."""
    client = QdrantClient(location=":memory:")
    dense = qm.VectorParams(size=dim, distance=qm.Distance.COSINE)
    client.create_collection(collection, vectors_config={VECTOR_NAME: dense})
    return QdrantStore(client, settings=QdrantSettings(url=":memory:"))
