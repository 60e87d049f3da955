"""One open Qdrant Edge shard (a collection of the embedded store): its config and indexes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import qdrant_edge as qe

from core.vectorstore.base import KEYWORDS_VECTOR, VECTOR_NAME, StoreError
from core.vectorstore.edge_requests import KINDS
from core.vectorstore.engine import FieldKind
from core.vectorstore.rwlock import RWLock

# The IDF modifier: the engine weighs each word by its rarity over the collection (BM25's IDF).
SPARSE_PARAMS = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
# Qdrant's server default (KB of vectors): below it a segment is scanned, not searched by graph.
_FULL_SCAN_THRESHOLD_KB = 10_000


@dataclass
class OpenShard:
    """An open shard. Its methods are safe across threads (the engine locks inside), but
    `close()` needs exclusive access: pyo3 refuses it ('Already borrowed') during another call."""

    shard: qe.EdgeShard | None
    dim: int
    lock: RWLock
    # Whether it has the keywords vector: a shard of an earlier release gets it (and its
    # photos theirs) in ensure_indexes; the metadata file says so once that has finished.
    keywords: bool
    dropping: bool = False


@contextmanager
def engine_errors() -> Iterator[None]:
    try:
        yield
    except StoreError:
        raise
    except Exception as e:  # Edge raises bare Exception for every engine error
        raise StoreError(str(e)) from e


def shard_config(
    dim: int, hnsw_m: int, hnsw_ef_construct: int, quantization: bool
) -> qe.EdgeConfig:
    int8 = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True)
    return qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
        sparse_vectors={KEYWORDS_VECTOR: SPARSE_PARAMS},
        hnsw_config=qe.HnswIndexConfig(
            m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=_FULL_SCAN_THRESHOLD_KB
        ),
        quantization_config=int8 if quantization else None,
    )


def missing_indexes(
    shard: qe.EdgeShard, indexes: Mapping[str, FieldKind]
) -> dict[str, qe.PayloadSchemaType]:
    """The payload indexes among these that a shard lacks (all of a new one)."""
    known = shard.info().payload_schema
    return {field: KINDS[kind] for field, kind in indexes.items() if field not in known}


def create_indexes(shard: qe.EdgeShard, schema: dict[str, qe.PayloadSchemaType]) -> None:
    for field, kind in schema.items():
        shard.update(qe.UpdateOperation.create_field_index(field, kind))
