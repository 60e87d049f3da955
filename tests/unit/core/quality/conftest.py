"""A small store for the quality unit tests: five photos of 4 dimensions (two of them
near-duplicates) in two collections, a judgement set over them, and an embedder of fixed
vectors whose version 2 is a broken model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.quality.judgements import JudgementSet, Query
from core.vectorstore import GROUP_FIELD, LIVE_ALIAS, PhotoPoint, VectorStore, collection_name
from tests.support.stores import engine_store

GOOD = collection_name(1, "good")
BAD = collection_name(2, "bad")


def _unit(*parts: float) -> Embeddings:
    v = np.asarray(parts, dtype=np.float32)
    return v / np.linalg.norm(v)


# cat2 is cat1's near-duplicate (one group); the rest lean a little towards the cat, and all
# a little towards the cup, so that a search for either ranks every photo in a fixed order:
# cat1, cat2, dog, moon, cup for the cat; cup, moon, cat1, cat2, dog for the cup.
PHOTOS = [
    PhotoPoint("cat1", _unit(1, 0, 0, 0.04), {"title": "cat on a sofa", GROUP_FIELD: "cat1"}),
    PhotoPoint("cat2", _unit(0.99, 0.14, 0, 0.03), {"title": "cat asleep", GROUP_FIELD: "cat1"}),
    PhotoPoint("dog", _unit(0.3, 1, 0, 0.02), {"title": "dog in the park"}),
    PhotoPoint("moon", _unit(0.1, 0, 1, 0.05), {"title": "moon at night"}),
    PhotoPoint("cup", _unit(0.05, 0, 0.2, 1), {"title": "coffee cup"}),
]
TEXTS = {
    "a cat": _unit(1, 0, 0, 0),
    "the moon": _unit(0, 0, 1, 0),
    "coffee": _unit(0, 0, 0, 1),
    "a sofa": _unit(0, 0, 0, 1),  # looks like the cup; only the cat's title says sofa
}
SET = JudgementSet(
    "fixture",
    (
        Query("q1", "A  Cat", ("animal",)),  # embedded as the API would: "a cat"
        Query("q2", "the moon", ("space",)),
        Query("q3", "coffee", ("object",)),  # nothing judged relevant: left out
    ),
    {"q1": {"cat1": 1, "cat2": 1}, "q2": {"moon": 2, "cup": 0}, "q3": {"cup": 0}},
)


class Embedder:
    """Texts to fixed vectors; version 2 is a broken model that sees a cup in everything."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], int]] = []

    def __call__(self, texts: Sequence[str], version: int) -> Embeddings:
        self.calls.append((tuple(texts), version))
        if version == 2:
            return np.stack([TEXTS["coffee"] for _ in texts])
        return np.stack([TEXTS[t] for t in texts])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[VectorStore]:
    s = engine_store("edge", tmp_path, (GOOD, BAD), 4)
    s.upsert(GOOD, PHOTOS)
    s.upsert(BAD, PHOTOS)
    s.set_aliases({LIVE_ALIAS: GOOD})
    yield s
    s.close()
