"""An evaluation asked as data and answered on a store: every set, collection and mode, each
query embedded once, and a note where a collection has no keyword ranking."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.quality.request import answer, evaluation_request, set_from_dict, set_to_dict
from core.quality.runner import from_dict
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore
from tests.support.stores import store_without_keywords
from tests.unit.core.quality.conftest import BAD, GOOD, PHOTOS, SET, Embedder

OLD = "photos-m1-old"


def test_a_set_travels_as_data() -> None:
    assert set_from_dict(set_to_dict(SET)) == SET


def test_every_set_collection_and_mode_is_answered(store: VectorStore) -> None:
    embed = Embedder()
    asked: list[int] = []

    def calibration(version: int) -> None:
        asked.append(version)

    request = evaluation_request([SET], [LIVE_ALIAS, BAD], ["hybrid", "vector"], samples=50)
    found = answer(request, store=store, embed=embed, calibration=calibration)
    assert sorted(set(asked)) == [1, 2]  # each collection's own version's calibration
    assert found["notes"] == []
    got = [from_dict(e) for e in found["evaluations"]]
    assert [(e.mode, e.collection) for e in got] == [
        ("hybrid", GOOD),  # the alias, resolved
        ("hybrid", BAD),
        ("vector", GOOD),
        ("vector", BAD),
    ]
    assert all(e.samples == 50 and e.judgements == "fixture" for e in got)
    # Two modes ask for each query's embedding: each text is embedded once per version.
    assert sorted(embed.calls) == sorted({((t,), v) for t in ("a cat", "the moon") for v in (1, 2)})


def test_a_collection_without_keywords_is_noted(tmp_path: Path) -> None:
    old = store_without_keywords(OLD, 4)
    try:
        old.upsert(OLD, PHOTOS)
        request = evaluation_request([SET], [OLD], ["keyword", "vector"])
        found = answer(request, store=old, embed=Embedder())
    finally:
        old.close()
    assert found["notes"] == [f"{OLD} has no keyword vectors: no keyword ranking to measure"]
    assert [e["mode"] for e in found["evaluations"]] == ["vector"]


def test_an_unknown_collection_or_mode_is_refused(store: VectorStore) -> None:
    with pytest.raises(CollectionNotFound):
        answer(evaluation_request([SET], ["nowhere"], ["vector"]), store=store, embed=Embedder())
    with pytest.raises(ValueError, match="unknown modes"):
        evaluation_request([SET], [GOOD], ["fuzzy"])  # type: ignore[list-item]
