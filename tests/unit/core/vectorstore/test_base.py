"""What every store shares: point ids, collection names, search tuning, nearest_each."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import models as qm

from core.settings import QdrantSettings
from core.vectorstore.base import (
    GROUP_FIELD,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    StoreError,
    collection_name,
    model_version_of,
    payload_fields,
    point_id,
)
from core.vectorstore.store import nearest_each
from tests.support.stores import engine_store


def test_a_photo_has_one_point_id_for_ever() -> None:
    assert point_id("a/1.jpg") == point_id("a/1.jpg") != point_id("a/2.jpg")
    assert uuid.UUID(point_id("a/1.jpg")).version == 5


def test_a_collection_name_carries_its_model_version() -> None:
    assert collection_name(2, "Blue") == "photos-m2-blue"
    assert model_version_of("photos-m12-x9") == 12
    with pytest.raises(ValueError):
        collection_name(1, "no-dash")
    with pytest.raises(StoreError):
        model_version_of("photos")


def test_a_search_filter_knows_when_it_is_empty() -> None:
    assert SearchFilter().is_empty()
    assert not SearchFilter(exclude_ids=("p",)).is_empty()


def test_search_tuning_is_the_same_parameters_on_both_engines() -> None:
    tuning = SearchTuning(hnsw_ef=96, oversampling=2.0)
    server = tuning.params(qm.SearchParams, qm.QuantizationSearchParams, qm.AcornSearchParams)
    assert server == qm.SearchParams(
        hnsw_ef=96,
        exact=False,
        quantization=qm.QuantizationSearchParams(ignore=False, rescore=True, oversampling=2.0),
    )
    edge = SearchTuning(hnsw_ef=8, exact=True).params(
        qe.SearchParams, qe.QuantizationSearchParams, qe.AcornSearchParams
    )
    assert edge.hnsw_ef == 8 and edge.exact
    assert edge.quantization is not None and edge.quantization.ignore  # exact: no quantized copies


def test_acorn_is_asked_for_on_both_engines_unless_the_search_is_exact() -> None:
    acorn = SearchTuning(hnsw_ef=64, acorn=True)
    server = acorn.params(qm.SearchParams, qm.QuantizationSearchParams, qm.AcornSearchParams)
    assert server.acorn == qm.AcornSearchParams(enable=True)
    edge = acorn.params(qe.SearchParams, qe.QuantizationSearchParams, qe.AcornSearchParams)
    assert edge.acorn is not None and edge.acorn.enable
    exact = SearchTuning(hnsw_ef=64, acorn=True, exact=True)
    assert (
        exact.params(qm.SearchParams, qm.QuantizationSearchParams, qm.AcornSearchParams).acorn
        is None
    )
    shipped = SearchTuning.of(QdrantSettings())
    assert shipped.acorn


def test_a_read_selects_photo_id_with_the_fields_asked() -> None:
    assert payload_fields(None) is None
    assert payload_fields(()) == ["photo_id"]
    assert payload_fields(["tags", "photo_id"]) == ["photo_id", "tags"]


def test_nearest_each_answers_each_vector_with_its_closest_or_none(tmp_path: Path) -> None:
    store = engine_store("edge", tmp_path, (collection_name(1, "n"),), 2)
    try:
        coll = collection_name(1, "n")
        store.upsert(
            coll,
            [
                PhotoPoint("a", np.array([1, 0], np.float32), {GROUP_FIELD: "g"}),
                PhotoPoint("b", np.array([0, 1], np.float32), {"title": "b"}),
            ],
        )
        queries = np.array([[1, 0.05], [-1, 0], [0.05, 1]], np.float32)
        first, second, third = nearest_each(store, coll, queries, score_threshold=0.9)
        assert first is not None and (first.photo_id, first.payload) == (
            "a",
            {
                "photo_id": "a",
                GROUP_FIELD: "g",
            },
        )
        assert second is None
        assert third is not None and third.photo_id == "b" and "title" not in third.payload
        [excluded] = nearest_each(store, coll, queries[:1], score_threshold=0.9, exclude_ids=["a"])
        assert excluded is None
    finally:
        store.close()
