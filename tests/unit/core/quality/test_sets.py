"""The judgement sets PhotoSearch ships read cleanly and judge only photos they can find."""

from __future__ import annotations

from core.demo import DEMO_PHOTOS
from core.quality.judgements import SETS, load_judgements


def test_the_demo_set_judges_demo_photos() -> None:
    demo = load_judgements(SETS / "demo")
    ids = {photo.id for photo in DEMO_PHOTOS}
    judged = {p for grades in demo.qrels.values() for p in grades}
    assert judged <= ids
    assert len(demo.queries) >= 15
    # Every query has a photo that fits it, or it would measure nothing.
    assert all(any(g > 0 for g in demo.grades(q.id).values()) for q in demo.queries)
    # Some queries share no word with their photos' titles and tags: the vector side's own.
    assert sum("paraphrase" in q.tags for q in demo.queries) >= 4
