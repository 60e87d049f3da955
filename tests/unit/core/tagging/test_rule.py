"""The tag rule on hand-made vectors: threshold, margin over the photo's mean, order, cap."""

from __future__ import annotations

import numpy as np

from core.embedding.arrays import Embeddings
from core.embedding.manifest import SearchCalibration, TagCalibration
from core.tagging.rule import TagRule, auto_tags, tag_scores, tagging_key


def unit(*values: float) -> Embeddings:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


# Four tags along the axes of a 4-d space.
NAMES = ("red", "circle", "striped", "blue")
TAGS = np.eye(4, dtype=np.float32)


def test_tags_above_threshold_and_margin_come_best_first() -> None:
    photo = unit(0.2, 0.9, 0.4, 0.0)  # circle, then striped, red, blue
    tags = auto_tags(photo[None, :], NAMES, TAGS, TagRule(threshold=0.15, margin=-1.0))
    assert tags == [["circle", "striped", "red"]]


def test_the_threshold_drops_weak_tags() -> None:
    photo = unit(0.2, 0.9, 0.4, 0.0)
    cosines, _ = tag_scores(photo[None, :], TAGS)
    assert cosines[0, 0] < 0.3 < cosines[0, 2]
    assert auto_tags(photo[None, :], NAMES, TAGS, TagRule(0.3, -1.0)) == [["circle", "striped"]]


def test_the_margin_is_over_the_photos_mean_cosine() -> None:
    # Close to every tag alike: each cosine passes a threshold of 0.4 but none stands out.
    flat = unit(1.0, 1.0, 1.0, 0.9)
    peaked = unit(0.1, 1.0, 0.1, 0.1)
    rule = TagRule(threshold=0.4, margin=0.2)
    cosines, excess = tag_scores(np.stack([flat, peaked]), TAGS)
    assert (cosines[0] >= 0.4).all() and (excess[0] < 0.2).all()
    np.testing.assert_allclose(excess.mean(axis=1), 0.0, atol=1e-6)
    assert auto_tags(np.stack([flat, peaked]), NAMES, TAGS, rule) == [[], ["circle"]]


def test_a_photo_keeps_at_most_max_tags() -> None:
    photo = unit(0.5, 0.6, 0.7, 0.8)
    every = auto_tags(photo[None, :], NAMES, TAGS, TagRule(-1.0, -1.0))
    assert every == [["blue", "striped", "circle", "red"]]
    assert auto_tags(photo[None, :], NAMES, TAGS, TagRule(-1.0, -1.0), max_tags=2) == [
        ["blue", "striped"]
    ]


def test_no_photos_give_no_tags() -> None:
    assert auto_tags(np.zeros((0, 4), dtype=np.float32), NAMES, TAGS, TagRule(0.0, 0.0)) == []


def test_the_tagging_key_changes_with_vocabulary_and_rule() -> None:
    keys = {
        tagging_key("v1", TagRule(0.2, 0.05)),
        tagging_key("v2", TagRule(0.2, 0.05)),
        tagging_key("v1", TagRule(0.21, 0.05)),
        tagging_key("v1", TagRule(0.2, 0.06)),
        tagging_key("v1", TagRule(0.2, 0.05), max_tags=5),
    }
    assert len(keys) == 5
    assert tagging_key("v1", TagRule(0.2, 0.05)) == tagging_key("v1", TagRule(0.2, 0.05))


def test_the_manifest_carries_the_calibrated_rule() -> None:
    tagging = TagCalibration(threshold=0.25, margin=0.1, enabled=True, vocabulary="x")
    calibration = SearchCalibration(tagging=tagging)
    again = SearchCalibration.model_validate_json(calibration.model_dump_json())
    assert again.tagging is not None and again.tagging.rule() == TagRule(0.25, 0.1)
    assert SearchCalibration.model_validate({}).tagging is None
