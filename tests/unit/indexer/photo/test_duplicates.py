"""The indexer's near-duplicate grouping of one batch: earlier photos first, stored ones
preferred on a tie, and the labels that photos of an earlier release lack."""

from __future__ import annotations

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.vectorstore import GROUP_FIELD, Hit
from indexer.photo.duplicates import assign, earlier_neighbours

THRESHOLD = 0.9


def unit(rows: list[list[float]]) -> Embeddings:
    vectors = np.asarray(rows, dtype=np.float32)
    unit_rows: Embeddings = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit_rows


def near(vector: list[float], cosine: float, away: int) -> list[float]:
    """A vector at this cosine from a unit vector along one axis, leaning towards another."""
    other = [0.0] * len(vector)
    other[away] = 1.0
    sine = float(np.sqrt(1 - cosine**2))
    return [cosine * v + sine * o for v, o in zip(vector, other, strict=True)]


A = [1.0, 0.0, 0.0, 0.0]
B = [0.0, 1.0, 0.0, 0.0]


def test_a_batch_groups_each_photo_with_its_most_similar_earlier_one() -> None:
    # a, b distinct; a2 near a (0.99), b2 near b (0.95); a3 nearer a2 (0.999) than a.
    a2 = near(A, 0.99, away=2)
    vectors = unit([A, B, a2, near(B, 0.95, away=3), near(a2, 0.999, away=3)])
    neighbours = earlier_neighbours(vectors, THRESHOLD)
    assert [n and n[0] for n in neighbours] == [None, None, 0, 1, 2]
    assert neighbours[2] is not None and neighbours[2][1] == pytest.approx(0.99, abs=1e-5)

    grouping = assign(["a", "b", "a2", "b2", "a3"], vectors, [None] * 5, THRESHOLD)
    assert grouping.labels == ["a", "b", "a", "b", "a"]
    assert grouping.founders == ["a", "b"]
    assert grouping.unlabelled == []


def test_below_the_threshold_each_starts_its_own_group_and_the_threshold_counts() -> None:
    vectors = unit([A, near(A, 0.9, away=1), near(A, 0.89, away=2)])
    # Exactly at the threshold joins: the setting is "at or above".
    grouping = assign(["x", "y", "z"], vectors, [None] * 3, 0.9 - 1e-6)
    assert grouping.labels == ["x", "x", "z"]
    assert assign(["x", "y", "z"], vectors, [None] * 3, 0.95).labels == ["x", "y", "z"]


def test_the_more_similar_of_stored_and_earlier_wins_and_a_tie_goes_to_the_stored() -> None:
    vectors = unit([A, near(A, 0.95, away=1), near(A, 0.95, away=2)])
    # third: as similar to "old" (stored) as to "first" (earlier in the batch): a tie.
    earlier = earlier_neighbours(vectors, THRESHOLD)[2]
    assert earlier is not None and earlier[0] == 0
    tie = earlier[1]
    stored = [
        None,
        Hit("old", 0.97, {"photo_id": "old", GROUP_FIELD: "g-old"}),  # nearer than "first"
        Hit("old", tie, {"photo_id": "old", GROUP_FIELD: "g-old"}),
    ]
    grouping = assign(["first", "second", "third"], vectors, stored, THRESHOLD)
    assert grouping.labels == ["first", "g-old", "g-old"]
    assert grouping.founders == ["first"]

    weaker = [None, None, Hit("old", 0.91, {"photo_id": "old", GROUP_FIELD: "g-old"})]
    assert assign(["first", "second", "third"], vectors, weaker, THRESHOLD).labels == [
        "first",
        "first",
        "first",
    ]


def test_a_stored_neighbour_without_a_label_names_the_group_and_is_labelled_once() -> None:
    vectors = unit([A, B, near(A, 0.99, away=2)])
    legacy = Hit("legacy", 0.96, {"photo_id": "legacy"})  # written by an earlier release
    grouping = assign(["p", "q", "r"], vectors, [legacy, None, legacy], THRESHOLD)
    assert grouping.labels == ["legacy", "q", "legacy"]
    assert grouping.unlabelled == ["legacy"]
    assert grouping.founders == ["q"]


def test_an_empty_batch_and_mismatched_lengths() -> None:
    empty = np.zeros((0, 4), dtype=np.float32)
    assert earlier_neighbours(empty, THRESHOLD) == []
    assert assign([], empty, [], THRESHOLD).labels == []
    with pytest.raises(ValueError, match="differ in length"):
        assign(["a"], unit([A, B]), [None, None], THRESHOLD)
