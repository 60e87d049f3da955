"""An Edge shard's configuration and payload indexes, and its errors as the store's."""

from __future__ import annotations

from pathlib import Path

import pytest
import qdrant_edge as qe

from core.vectorstore import KEYWORDS_VECTOR, VECTOR_NAME, StoreError
from core.vectorstore.edge_shard import (
    create_indexes,
    engine_errors,
    index_params,
    missing_indexes,
    shard_config,
)
from core.vectorstore.schema import PAYLOAD_INDEXES, CollectionSchema, FieldIndex


def test_a_new_shard_gets_every_payload_index_and_then_lacks_none(tmp_path: Path) -> None:
    config = shard_config(4, CollectionSchema(hnsw_m=8, hnsw_ef_construct=32), PAYLOAD_INDEXES)
    assert set(config.vectors) == {VECTOR_NAME} and set(config.sparse_vectors) == {KEYWORDS_VECTOR}
    assert isinstance(config.quantization_config, qe.TurboQuantQuantizationConfig)
    # created_at has a payload subgraph (schema.SUBGRAPHS): the graph builds them.
    assert config.hnsw_config is not None
    assert config.hnsw_config.payload_m == CollectionSchema().subgraph_m > 0
    unquantized = shard_config(4, CollectionSchema(quantizer=None), PAYLOAD_INDEXES)
    assert unquantized.quantization_config is None
    shard = qe.EdgeShard.create(str(tmp_path / "s"), config)
    try:
        missing = missing_indexes(shard, PAYLOAD_INDEXES)
        assert set(missing) == set(PAYLOAD_INDEXES)
        assert missing["created_at"].kind == "datetime"
        create_indexes(shard, missing)
        assert missing_indexes(shard, PAYLOAD_INDEXES) == {}
        # Each index as the schema says: the engine reports its parameters back.
        width = shard.info().payload_schema["width"]
        assert width.data_type == qe.PayloadSchemaType.Integer
        assert isinstance(width.params, qe.IntegerIndexParams)
        assert (width.params.lookup, width.params.range) == (False, True)
        assert width.params.memory == qe.Memory.Cold and width.params.enable_hnsw is False
        created = shard.info().payload_schema["created_at"].params
        assert isinstance(created, qe.DatetimeIndexParams) and created.enable_hnsw
    finally:
        shard.close()


def test_a_field_that_asks_for_a_subgraph_gets_one_and_the_graph_its_payload_m() -> None:
    indexes = {"license": FieldIndex("keyword", subgraph=True), "tags": FieldIndex("keyword")}
    config = shard_config(4, CollectionSchema(hnsw_m=12, subgraph_m=6), indexes)
    assert config.hnsw_config is not None and config.hnsw_config.payload_m == 6
    alone = shard_config(4, CollectionSchema(), {"tags": FieldIndex("keyword")})
    assert alone.hnsw_config is not None and alone.hnsw_config.payload_m == 0
    keyword = index_params(indexes["license"])
    assert isinstance(keyword, qe.KeywordIndexParams) and keyword.enable_hnsw


def test_an_engine_error_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="boom"), engine_errors():
        raise Exception("boom")
    with pytest.raises(StoreError, match="as it was"), engine_errors():
        raise StoreError("as it was")
