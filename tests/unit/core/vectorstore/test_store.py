"""The store written once over an engine, on Qdrant Edge and on qdrant-client's local mode:
the neutral writes of the keywords vector, an engine's points read back, the payload indexes."""

from __future__ import annotations

import numpy as np

from core.embedding.attributes import PALETTE
from core.keywords import document_vector
from core.payload import PhotoPayload
from core.vectorstore import (
    KEYWORDS_VECTOR,
    VECTOR_NAME,
    VectorStore,
    point_id,
)
from core.vectorstore.engine import DeleteVectors, SetVectors, embedding_of, hit_of, stored_of
from core.vectorstore.keyword_vectors import keyword_writes
from core.vectorstore.schema import PAYLOAD_INDEXES


def test_keyword_writes_give_words_a_vector_and_take_it_from_the_wordless() -> None:
    payloads: dict[str, PhotoPayload] = {"a": {"title": "Red tulips"}, "b": {"tags": []}}
    set_vectors, delete = keyword_writes(payloads)
    assert set_vectors == SetVectors(
        {point_id("a"): {KEYWORDS_VECTOR: document_vector(payloads["a"])}}
    )
    assert delete == DeleteVectors((point_id("b"),), (KEYWORDS_VECTOR,))
    assert keyword_writes({"b": {}}) == [DeleteVectors((point_id("b"),), (KEYWORDS_VECTOR,))]


def test_an_engines_point_becomes_a_hit_or_a_stored_photo() -> None:
    vectors = {VECTOR_NAME: [0.6, 0.8], KEYWORDS_VECTOR: object()}
    hit = hit_of(0.5, {"photo_id": "p1", "tags": ["x"]}, vectors)
    assert (hit.photo_id, hit.score, hit.payload) == ("p1", 0.5, {"photo_id": "p1", "tags": ["x"]})
    assert hit.vector is not None and hit.vector.dtype == np.float32
    np.testing.assert_allclose(hit.vector, [0.6, 0.8])
    assert embedding_of(None) is None and embedding_of({}) is None
    assert (
        stored_of(None, False).payload == {} and stored_of({"photo_id": "q"}, None).vector is None
    )


def test_both_engines_serve_the_one_store_with_every_filtered_field_indexed(
    store: VectorStore,
) -> None:
    assert isinstance(store, VectorStore)
    filtered = {"tags", "photographer", "license", "created_at", "shard", "source_key"}
    # The visual filters and the automatic tags (core/embedding/attributes.py).
    visual = {"auto_tags", "colors", "orientation", "width", "height", "copy_space"}
    shares = {f"color_shares.{name}" for name in PALETTE}
    filtered |= visual | shares
    # And the identity, the groups, the version, the words suggestions complete and the
    # popularity the boost reads.
    read = {"dup_group", "photo_id", "model_version", "terms", "popularity"}
    assert filtered | read == set(PAYLOAD_INDEXES)
    kinds = {field: index.kind for field, index in PAYLOAD_INDEXES.items()}
    assert kinds["created_at"] == "datetime"
    assert kinds["model_version"] == "integer"
    assert kinds["copy_space"] == kinds["width"] == "integer"
    assert {kinds[field] for field in shares} == {"float"}
    assert kinds["popularity"] == "float"
