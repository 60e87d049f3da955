"""A small store on each engine for the store's unit tests: 120 photos of 8 dimensions with
titles of two words and two photographers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.vectorstore import PhotoPoint, VectorStore, collection_name
from tests.support.stores import ENGINES, engine_store

DIM = 8
COLL = collection_name(1, "u")
WORDS = ["red", "green", "blue", "cat", "dog", "tree", "sun", "moon"]
RRF_K = 60


def photos(n: int = 120) -> list[PhotoPoint]:
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        PhotoPoint(
            f"p{i:03d}",
            vectors[i],
            {"title": " ".join(rng.choice(WORDS, 2)), "photographer": "ann" if i % 2 else "bob"},
        )
        for i in range(n)
    ]


PHOTOS = photos()


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = engine_store(request.param, tmp_path, (COLL,), DIM)
    s.upsert(COLL, PHOTOS)
    yield s
    s.close()
