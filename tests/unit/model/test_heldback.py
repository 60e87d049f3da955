"""Held-back figures: precision@10 and recall@10 of shape-colour queries against chance."""

from __future__ import annotations

import numpy as np
import pytest

from model.heldback import TOP, retrieval_figures, shape_colour_queries
from model.synthetic import Content


def test_a_ranking_by_content_and_a_blind_one_against_chance() -> None:
    queries = shape_colour_queries()
    assert len(queries) == 48 and queries[0][0] == "a red circle"
    assert ("an orange star", "star", "orange") in queries
    # 96 photos: two of each pair; each embedding is the one-hot of its pair.
    contents = [Content(s, c, "small", "left", 1, "plain") for _, s, c in queries for _ in (0, 1)]
    texts = np.eye(48, dtype=np.float32)
    images = np.repeat(texts, 2, axis=0)
    found = retrieval_figures(images, contents, texts)
    # Both relevant photos come first: precision 2/10, recall 1; chance 2/96 and 10/96.
    assert found == pytest.approx(
        {
            "queries": 48,
            "photos": 96,
            "precision_at_10": 2 / TOP,
            "recall_at_10": 1.0,
            "chance_precision_at_10": 2 / 96,
            "chance_recall_at_10": TOP / 96,
            "precision_lift": (2 / TOP) / (2 / 96),
            "recall_lift": 1.0 / (TOP / 96),
        }
    )
    # A model that sees nothing scores every photo alike: its top 10 are the first ten photos,
    # which only the first five queries' photos are.
    blind = retrieval_figures(np.ones((96, 48), dtype=np.float32), contents, texts)
    assert blind["precision_at_10"] == pytest.approx(5 * 2 / TOP / 48)
    assert blind["precision_lift"] == pytest.approx(1.0)


def test_a_pair_the_set_lacks_has_no_figure() -> None:
    contents = [Content("circle", "red", "small", "left", 1, "plain")] * 10
    texts = np.eye(48, dtype=np.float32)
    found = retrieval_figures(np.tile(texts[:1], (10, 1)), contents, texts)
    assert found["queries"] == 1
    assert found["precision_at_10"] == pytest.approx(1.0)
