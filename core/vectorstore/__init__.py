"""The vector store both the indexer and the query API use, and how settings choose it."""

from __future__ import annotations

import math

from core.settings import Settings
from core.vectorstore.base import (
    DATETIME_FIELDS,
    GROUP_FIELD,
    INTEGER_FIELDS,
    KEY_FIELD,
    KEYWORD_FIELDS,
    KEYWORDS_VECTOR,
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    SHARD_FIELD,
    VECTOR_NAME,
    CollectionInfo,
    CollectionNotFound,
    Hit,
    IndexedPoint,
    KeywordsUnavailable,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    SparseVector,
    StoredPhoto,
    StoreError,
    collection_name,
    model_version_of,
    point_id,
)
from core.vectorstore.schema import schema_of
from core.vectorstore.store import VectorStore, nearest_each

__all__ = [
    "DATETIME_FIELDS",
    "GROUP_FIELD",
    "INTEGER_FIELDS",
    "KEYWORDS_VECTOR",
    "KEYWORD_FIELDS",
    "KEY_FIELD",
    "LIVE_ALIAS",
    "PREVIOUS_ALIAS",
    "SHARD_FIELD",
    "VECTOR_NAME",
    "CollectionInfo",
    "CollectionNotFound",
    "Hit",
    "IndexedPoint",
    "KeywordsUnavailable",
    "PhotoPoint",
    "SearchFilter",
    "SearchTuning",
    "SparseVector",
    "StoreError",
    "StoredPhoto",
    "VectorStore",
    "collection_name",
    "model_version_of",
    "nearest_each",
    "open_store",
    "point_id",
]


def open_store(settings: Settings) -> VectorStore:
    """Qdrant Edge under settings.qdrant.path when no URL is set, else qdrant-client."""
    q = settings.qdrant
    if q.url is None:
        from core.vectorstore.edge import EdgeStore

        assert q.path is not None  # filled by Settings._derive_paths
        return EdgeStore(
            q.path,
            schema=schema_of(q),
            tuning=SearchTuning.of(q),
            min_free_mb=q.min_free_mb,
        )

    from qdrant_client import QdrantClient

    from core.vectorstore.qdrant import QdrantStore

    if q.url == ":memory:":
        client = QdrantClient(location=":memory:")
    else:
        # No version check at construction: it runs on a thread and only warns, and a replica
        # must start (and report itself not ready) while the server is down.
        client = QdrantClient(
            url=q.url,
            api_key=q.api_key,
            timeout=max(1, math.ceil(q.timeout_s)),
            check_compatibility=False,
        )
    return QdrantStore(client, settings=q)
