"""A collection as the release before the memory tiers made one (issue 42), for the tests that
an old collection still opens, searches and takes writes, and for the benchmarks' "before".

That release gave Qdrant Edge its defaults: int8 copies held in RAM, float32 originals, the
keywords' index and every payload index on the heap, and a payload subgraph for every field
(payload_m = m). Written here with the engine's own classes, as that release's code did.
"""

from __future__ import annotations

import json
from pathlib import Path

import qdrant_edge as qe

from core.vectorstore import KEYWORDS_VECTOR, VECTOR_NAME
from core.vectorstore.schema import PAYLOAD_INDEXES

_KINDS = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "datetime": qe.PayloadSchemaType.Datetime,
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
}


def previous_config(dim: int, *, m: int, ef_construct: int) -> qe.EdgeConfig:
    int8 = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True)
    return qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
        sparse_vectors={KEYWORDS_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct, full_scan_threshold=10_000),
        quantization_config=int8,
    )


def create_previous_collection(
    store_dir: Path, name: str, dim: int, *, m: int = 16, ef_construct: int = 128
) -> None:
    """An empty collection `name` in the embedded store at `store_dir` (not open), as the
    previous release created it: its shard, its payload indexes, its metadata file."""
    collections = store_dir / "collections"
    shard = qe.EdgeShard.create(
        str(collections / name), previous_config(dim, m=m, ef_construct=ef_construct)
    )
    try:
        for field, index in PAYLOAD_INDEXES.items():
            shard.update(qe.UpdateOperation.create_field_index(field, _KINDS[index.kind]))
        shard.flush()
    finally:
        shard.close()
    meta = {"dim": dim, "keywords": True}
    (collections / f"{name}.json").write_text(json.dumps(meta), encoding="utf-8")
