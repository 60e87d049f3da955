"""The two engines a store-level test runs on: Qdrant Edge in-process, and qdrant-client's
local mode (the server's API, answered in Python)."""

from __future__ import annotations

from pathlib import Path

from core.settings import QdrantSettings, Settings
from core.vectorstore import VectorStore, open_store
from core.vectorstore.base import SearchTuning
from core.vectorstore.edge import EdgeStore

ENGINES = ["edge", "qdrant-local"]


def engine_store(engine: str, folder: Path, collections: tuple[str, ...], dim: int) -> VectorStore:
    """A store of that engine in the folder, with the collections created."""
    store: VectorStore
    if engine == "edge":
        store = EdgeStore(
            folder / "vectors",
            hnsw_m=16,
            hnsw_ef_construct=64,
            quantization=False,
            tuning=SearchTuning(hnsw_ef=64),
        )
    else:
        store = open_store(Settings(data_dir=folder, qdrant=QdrantSettings(url=":memory:")))
    for name in collections:
        store.create_collection(name, dim)
    return store
