"""One open Qdrant Edge shard (a collection of the embedded store): its config and indexes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import qdrant_edge as qe

from core.vectorstore.base import KEYWORDS_VECTOR, VECTOR_NAME, StoreError
from core.vectorstore.rwlock import RWLock
from core.vectorstore.schema import CollectionSchema, FieldIndex, Tier


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


MEMORY = {Tier.PINNED: qe.Memory.Pinned, Tier.CACHED: qe.Memory.Cached, Tier.COLD: qe.Memory.Cold}
DATATYPES = {
    "float32": qe.VectorStorageDatatype.Float32,
    "float16": qe.VectorStorageDatatype.Float16,
}


def quantization(schema: CollectionSchema) -> qe.QuantizationConfigType | None:
    memory = MEMORY[schema.quantized]
    if schema.quantizer == "turbo4":
        return qe.TurboQuantQuantizationConfig(bits=qe.TurboQuantBitSize.Bits4, memory=memory)
    if schema.quantizer == "int8":
        return qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=memory)
    return None


def shard_config(
    dim: int, schema: CollectionSchema, indexes: Mapping[str, FieldIndex]
) -> qe.EdgeConfig:
    """A new shard's configuration: the schema's tiers, quantization and graph."""
    # The IDF modifier: the engine weighs each word by its rarity over the collection (BM25's IDF).
    sparse = qe.EdgeSparseVectorParams(
        modifier=qe.Modifier.Idf, memory=MEMORY[schema.keywords_index]
    )
    dense = qe.EdgeVectorParams(
        size=dim,
        distance=qe.Distance.Cosine,
        datatype=DATATYPES[schema.datatype],
        memory=MEMORY[schema.originals],
    )
    return qe.EdgeConfig(
        vectors={VECTOR_NAME: dense},
        sparse_vectors={KEYWORDS_VECTOR: sparse},
        hnsw_config=qe.HnswIndexConfig(
            m=schema.hnsw_m,
            ef_construct=schema.hnsw_ef_construct,
            full_scan_threshold=schema.full_scan_threshold_kb,
            payload_m=schema.payload_m(indexes),
            memory=MEMORY[schema.graph],
        ),
        quantization_config=quantization(schema),
        payload_memory=MEMORY[schema.payload],
        id_tracker_memory=MEMORY[schema.id_tracker],
        optimizers=None
        if schema.indexing_threshold_kb is None
        else qe.EdgeOptimizersConfig(indexing_threshold=schema.indexing_threshold_kb),
    )


def index_params(index: FieldIndex) -> qe.PayloadSchemaParams:
    """A payload index's parameters in the engine's classes: its tier and subgraph, and an
    integer's halves."""
    memory, hnsw = MEMORY[index.tier], index.subgraph
    match index.kind:
        case "keyword":
            return qe.KeywordIndexParams(enable_hnsw=hnsw, memory=memory)
        case "integer":
            return qe.IntegerIndexParams(
                lookup=index.lookup, range=index.range, enable_hnsw=hnsw, memory=memory
            )
        case "float":
            return qe.FloatIndexParams(enable_hnsw=hnsw, memory=memory)
        case "datetime":
            return qe.DatetimeIndexParams(enable_hnsw=hnsw, memory=memory)


def missing_indexes(
    shard: qe.EdgeShard, indexes: Mapping[str, FieldIndex]
) -> dict[str, FieldIndex]:
    """The payload indexes among these that a shard lacks (all of a new one)."""
    known = shard.info().payload_schema
    return {field: index for field, index in indexes.items() if field not in known}


def create_indexes(shard: qe.EdgeShard, indexes: Mapping[str, FieldIndex]) -> None:
    for field, index in indexes.items():
        shard.update(qe.UpdateOperation.create_field_index(field, index_params(index)))
