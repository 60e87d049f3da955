"""The collection each engine makes follows core/vectorstore/schema.py: tiers, quantization,
payload subgraphs and index parameters, read back from Qdrant Edge and, on the server path, from
the requests sent (the stand-in ignores them); a collection of the previous release keeps
working; filtered searches find what exact search finds: a date window on its payload
subgraph, any other filter with ACORN."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from core.embedding.arrays import Embeddings
from core.settings import QdrantSettings
from core.vectorstore import PhotoPoint, SearchFilter, SearchTuning, collection_name
from core.vectorstore.edge import EdgeStore
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.schema import PAYLOAD_INDEXES, CollectionSchema, schema_of
from harness.previous import create_previous_collection
from tests.support.qdrant_server import qdrant_stand_in

COLL = collection_name(3, "schema")
SUBGRAPH_M = CollectionSchema().subgraph_m
DIM = 32
SHIPPED = QdrantSettings()
# What the shipped schema gives each payload index (engine's names).
INTEGER_HALVES = {
    "model_version": (True, False),
    "width": (False, True),
    "height": (False, True),
    "copy_space": (True, False),
}


def unit_vectors(n: int, seed: int) -> Embeddings:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float32)


def edge_config(store_dir: Path, name: str = COLL) -> dict[str, Any]:
    """The configuration the engine wrote for the shard."""
    text = (store_dir / "collections" / name / "edge_config.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def indexed_fields(store_dir: Path, name: str = COLL) -> dict[str, Any]:
    """The payload indexes the engine built, with their parameters, from its segments' files."""
    found: dict[str, Any] = {}
    for config in (store_dir / "collections" / name / "segments").glob(
        "*/payload_index/config.json"
    ):
        found |= json.loads(config.read_text(encoding="utf-8"))["indexed_fields"]
    return found


def test_qdrant_edge_makes_the_shipped_schema(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, schema=schema_of(SHIPPED), tuning=SearchTuning.of(SHIPPED))
    try:
        store.create_collection(COLL, DIM)
        store.upsert(COLL, [PhotoPoint("p0", unit_vectors(1, 0)[0], {"tags": ["a"]})])
    finally:
        store.close()
    config = edge_config(tmp_path)
    assert config["vectors"]["image"] | {"size": DIM} == {
        "size": DIM,
        "distance": "Cosine",
        "memory": "cold",
        "datatype": "float16",
    }
    assert config["quantization_config"] == {"turbo": {"memory": "pinned", "bits": "bits4"}}
    hnsw = config["hnsw_config"]
    assert (hnsw["m"], hnsw["payload_m"], hnsw["memory"]) == (16, SUBGRAPH_M, "pinned")
    assert hnsw["full_scan_threshold"] == SHIPPED.full_scan_threshold_kb
    assert config["sparse_vectors"]["keywords"] == {"memory": "cold", "modifier": "idf"}
    assert (config["payload_memory"], config["id_tracker_memory"]) == ("cold", "cold")

    fields = indexed_fields(tmp_path)
    assert set(fields) == set(PAYLOAD_INDEXES)
    assert {f["memory"] for f in fields.values()} == {"cold"}
    # Only created_at builds a payload subgraph: ACORN serves the other filters.
    assert [name for name, f in fields.items() if f["enable_hnsw"]] == ["created_at"]
    for name, (lookup, ranged) in INTEGER_HALVES.items():
        assert (fields[name]["lookup"], fields[name]["range"]) == (lookup, ranged), name
    assert fields["created_at"]["type"] == "datetime" and fields["tags"]["type"] == "keyword"


def test_qdrant_edge_makes_int8_copies_when_asked(tmp_path: Path) -> None:
    settings = QdrantSettings(quantizer="int8", vector_datatype="float32", on_disk=False)
    store = EdgeStore(tmp_path, schema=schema_of(settings), tuning=SearchTuning.of(settings))
    try:
        store.create_collection(COLL, DIM)
    finally:
        store.close()
    config = edge_config(tmp_path)
    assert config["quantization_config"]["scalar"]["type"] == "int8"
    assert config["quantization_config"]["scalar"]["memory"] == "pinned"
    assert config["vectors"]["image"]["datatype"] == "float32"
    assert config["vectors"]["image"]["memory"] == "cached"


@pytest.fixture
def sent() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    requests: list[tuple[str, str, Any]] = []
    with qdrant_stand_in(requests) as url:
        yield url, requests


def test_a_server_is_asked_for_the_shipped_schema(
    sent: tuple[str, list[tuple[str, str, Any]]],
) -> None:
    url, requests = sent
    settings = QdrantSettings(url=url)
    store = QdrantStore(QdrantClient(url=url, check_compatibility=False), settings=settings)
    try:
        store.create_collection(COLL, DIM)
    finally:
        store.close()
    [create] = [b for verb, path, b in requests if (verb, path) == ("PUT", f"/collections/{COLL}")]
    assert isinstance(create, qm.CreateCollection)
    assert isinstance(create.vectors, dict)
    dense = create.vectors["image"]
    assert (dense.datatype, dense.memory) == (qm.Datatype.FLOAT16, qm.Memory.COLD)
    assert create.quantization_config == qm.TurboQuantization(
        turbo=qm.TurboQuantQuantizationConfig(
            bits=qm.TurboQuantBitSize.BITS4, memory=qm.Memory.PINNED
        )
    )
    assert create.hnsw_config is not None
    assert (create.hnsw_config.payload_m, create.hnsw_config.memory) == (
        SUBGRAPH_M,
        qm.Memory.PINNED,
    )
    assert create.hnsw_config.full_scan_threshold == settings.full_scan_threshold_kb
    assert create.sparse_vectors is not None
    sparse = create.sparse_vectors["keywords"]
    assert sparse.index is not None and sparse.index.memory == qm.Memory.COLD
    assert create.payload == qm.PayloadStorageParams(memory=qm.Memory.COLD)
    assert create.id_tracker == qm.IdTrackerParams(memory=qm.Memory.COLD)
    assert (create.shard_number, create.replication_factor) == (6, 2)

    indexes = {
        b.field_name: b.field_schema
        for verb, path, b in requests
        if (verb, path) == ("PUT", f"/collections/{COLL}/index")
    }
    assert set(indexes) == set(PAYLOAD_INDEXES)
    for name, schema in indexes.items():
        assert not isinstance(schema, qm.PayloadSchemaType), name  # parameters, not defaults
        assert schema.memory == qm.Memory.COLD, name
        assert schema.enable_hnsw is (name == "created_at"), name
    for name, (lookup, ranged) in INTEGER_HALVES.items():
        integer = indexes[name]
        assert isinstance(integer, qm.IntegerIndexParams)
        assert (integer.lookup, integer.range) == (lookup, ranged), name


def test_a_collection_of_the_previous_release_opens_searches_and_takes_writes(
    tmp_path: Path,
) -> None:
    create_previous_collection(tmp_path, COLL, DIM)
    vectors = unit_vectors(50, 1)
    store = EdgeStore(tmp_path, schema=schema_of(SHIPPED), tuning=SearchTuning.of(SHIPPED))
    try:
        store.ensure_indexes(COLL)  # what a start does: nothing is missing
        store.upsert(
            COLL, [PhotoPoint(f"p{i}", v, {"tags": [f"t{i % 5}"]}) for i, v in enumerate(vectors)]
        )
        hits = store.search(COLL, vectors[7], limit=3)
        assert hits[0].photo_id == "p7"
        tagged = store.search(COLL, vectors[7], limit=50, filter=SearchFilter(tags_any=("t2",)))
        assert {h.photo_id for h in tagged} == {f"p{i}" for i in range(50) if i % 5 == 2}
        store.set_payload(COLL, "p7", {"tags": ["renamed"]})
        [kept] = store.retrieve(COLL, ["p7"], with_vectors=True)
        assert kept.payload["tags"] == ["renamed"]
        # float32 originals, as that release kept them
        assert kept.vector is not None and np.allclose(kept.vector, vectors[7], atol=1e-6)
    finally:
        store.close()
    # It keeps its own configuration: int8 copies, no tiers.
    config = edge_config(tmp_path)
    assert "scalar" in config["quantization_config"]
    assert "datatype" not in config["vectors"]["image"] or config["vectors"]["image"][
        "datatype"
    ] in (None, "float32")


def filtered_collection(store: EdgeStore, r: random.Random) -> Embeddings:
    """3,000 photos, each with a date over 1,000 days and tag "s<n>" where n is its number
    modulo 100 (a tag of 1%: "s0"; of 5%: "s0".."s4"; of 20%: "s0".."s19"), indexed."""
    vectors = unit_vectors(3000, 2)
    store.create_collection(COLL, DIM)
    for first in range(0, 3000, 500):
        store.upsert(
            COLL,
            [
                PhotoPoint(
                    f"p{i}",
                    vectors[i],
                    {
                        "created_at": (START + timedelta(days=r.randrange(1000))).isoformat(),
                        "tags": [f"s{i % 100}"],
                    },
                )
                for i in range(first, first + 500)
            ],
        )
    store.optimize(COLL)
    assert store.index_ready(COLL)
    return vectors


START = datetime(2020, 1, 1, tzinfo=UTC)
# A graph even for this small collection, and every filter walked on it (no full scan):
# what 1e8 photos in segments of ~2e6 do with these filters.
WALKED = CollectionSchema(indexing_threshold_kb=1, full_scan_threshold_kb=1)
SHARES = ((0.01, 11), (0.05, 12), (0.2, 13))


def test_a_date_window_walks_its_subgraph_without_acorn(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, schema=WALKED, tuning=SearchTuning(hnsw_ef=64))
    r = random.Random(3)
    try:
        filtered_collection(store, r)
        # Without ACORN (which filters.walking leaves off for a filter on created_at alone):
        # the subgraph finds the window's photos.
        walked = SearchTuning(hnsw_ef=128, oversampling=4.0)
        exact = SearchTuning(hnsw_ef=128, exact=True)
        for share, q in SHARES:
            since = START + timedelta(days=r.randrange(int(1000 * (1 - share))))
            window = SearchFilter(
                created_from=since, created_to=since + timedelta(days=1000 * share)
            )
            query = unit_vectors(1, q)[0]
            found = store.search(COLL, query, limit=10, filter=window, tuning=walked)
            truth = store.search(COLL, query, limit=10, filter=window, tuning=exact)
            assert len(truth) == 10
            assert [h.photo_id for h in found] == [h.photo_id for h in truth], share
    finally:
        store.close()


def test_other_filters_with_acorn_find_what_exact_search_finds(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, schema=WALKED, tuning=SearchTuning(hnsw_ef=64))
    try:
        filtered_collection(store, random.Random(3))
        acorn = SearchTuning(hnsw_ef=128, oversampling=4.0, acorn=True)
        exact = SearchTuning(hnsw_ef=128, exact=True)
        for share, q in SHARES:
            tags = SearchFilter(tags_any=tuple(f"s{n}" for n in range(int(share * 100))))
            query = unit_vectors(1, q)[0]
            found = store.search(COLL, query, limit=10, filter=tags, tuning=acorn)
            truth = store.search(COLL, query, limit=10, filter=tags, tuning=exact)
            assert len(truth) == 10
            assert [h.photo_id for h in found] == [h.photo_id for h in truth], share
            if share == 0.01:
                # Without ACORN and without a payload subgraph the graph loses a narrow filter's
                # photos: what ACORN is for.
                plain = replace(acorn, acorn=False)
                missed = store.search(COLL, query, limit=10, filter=tags, tuning=plain)
                assert [h.photo_id for h in missed] != [h.photo_id for h in truth]
    finally:
        store.close()
