"""Boosted searches over a Qdrant server's REST API (the stand-in of tests/support/qdrant_server.py)
give what Qdrant Edge and local mode give: the formula query, with a fusion nested in its
prefetch, goes over the wire in the server's shapes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.keywords import query_vector
from core.payload import PhotoPayload
from core.vectorstore import PhotoPoint, VectorStore, collection_name
from core.vectorstore.boosts import boosted_score
from core.vectorstore.engine import Boosted
from tests.support.qdrant_server import qdrant_stand_in
from tests.support.stores import STORES, any_store

DIM = 8
COLL = collection_name(1, "boost")
NOW = datetime(2026, 3, 1, tzinfo=UTC)
BOOST = Boosted(0.2, 60 * 86400.0, NOW, 0.3, 4.0)
WORDS = ("red", "boat", "cat", "sun")


def photos() -> list[PhotoPoint]:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(60, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    points = []
    for i, vector in enumerate(vectors):
        payload: PhotoPayload = {"title": " ".join(rng.choice(WORDS, 1 + i % 3))}
        if i % 4:
            payload["created_at"] = (NOW - timedelta(days=5 * i)).isoformat()
        if i % 5:
            payload["popularity"] = float(i % 9)
        points.append(PhotoPoint(f"q{i:02d}", vector, payload))
    return points


PHOTOS = photos()


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    with qdrant_stand_in() as url:
        yield url


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    made = any_store(
        request.param, tmp_path, COLL, DIM, lambda: request.getfixturevalue("qdrant_url")
    )
    made.upsert(COLL, PHOTOS)
    yield made
    made.close()


def by_formula(hits: list[Any]) -> list[tuple[str, float]]:
    scored = [(h.photo_id, boosted_score(h.score, h.payload, BOOST)) for h in hits]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


def test_a_boosted_hybrid_search_is_the_same_on_every_engine(store: VectorStore) -> None:
    query, words = PHOTOS[2].vector, query_vector("red boat")
    fusion = store.hybrid_search(COLL, query, words, limit=30, rrf_k=60)
    hits = store.hybrid_search(COLL, query, words, limit=30, rrf_k=60, keep=10, boost=BOOST)
    expected = by_formula(fusion)[:10]
    assert [h.photo_id for h in hits] == [pid for pid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-5)


def test_a_boosted_nearest_search_is_the_same_on_every_engine(store: VectorStore) -> None:
    query = PHOTOS[9].vector
    pool = store.search(COLL, query, limit=40)
    hits = store.search(COLL, query, limit=10, boost=BOOST, pool=40)
    expected = by_formula(pool)[:10]
    assert [h.photo_id for h in hits] == [pid for pid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-5)
