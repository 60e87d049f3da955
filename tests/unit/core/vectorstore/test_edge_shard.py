"""An Edge shard's configuration and payload indexes, and its errors as the store's."""

from __future__ import annotations

from pathlib import Path

import pytest
import qdrant_edge as qe

from core.vectorstore import KEYWORDS_VECTOR, VECTOR_NAME, StoreError
from core.vectorstore.edge_shard import (
    create_indexes,
    engine_errors,
    missing_indexes,
    shard_config,
)
from core.vectorstore.store import PAYLOAD_INDEXES


def test_a_new_shard_gets_every_payload_index_and_then_lacks_none(tmp_path: Path) -> None:
    config = shard_config(4, hnsw_m=8, hnsw_ef_construct=32, quantization=True)
    assert set(config.vectors) == {VECTOR_NAME} and set(config.sparse_vectors) == {KEYWORDS_VECTOR}
    assert config.quantization_config is not None
    assert shard_config(4, 8, 32, quantization=False).quantization_config is None
    shard = qe.EdgeShard.create(str(tmp_path / "s"), config)
    try:
        missing = missing_indexes(shard, PAYLOAD_INDEXES)
        assert set(missing) == set(PAYLOAD_INDEXES)
        assert missing["created_at"] == qe.PayloadSchemaType.Datetime
        create_indexes(shard, missing)
        assert missing_indexes(shard, PAYLOAD_INDEXES) == {}
    finally:
        shard.close()


def test_an_engine_error_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="boom"), engine_errors():
        raise Exception("boom")
    with pytest.raises(StoreError, match="as it was"), engine_errors():
        raise StoreError("as it was")
