"""The synthetic photos: seeded and reproducible, pictures that show their content record, titles
that do not define the truth, and judgement files that equal the committed ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from core.keywords import words
from model.synthetic import (
    COLOURS,
    Content,
    caption,
    generate,
    image_of,
    png_bytes,
    render,
)
from model.synthetic_judgements import (
    QRELS_FILE,
    QUERIES,
    QUERIES_FILE,
    SHIPPED,
    Query,
    write_judgements,
)


def test_the_same_seed_gives_the_same_records_and_bytes() -> None:
    first, again = generate(30, seed=5), generate(30, seed=5)
    assert first == again
    assert [png_bytes(image_of(p)) for p in first] == [png_bytes(image_of(p)) for p in again]
    other = generate(30, seed=6)
    assert [p.content for p in other] != [p.content for p in first]


def test_a_photo_is_the_same_whatever_the_count() -> None:
    assert generate(10, seed=3) == generate(40, seed=3)[:10]


def test_a_caption_names_what_is_shown() -> None:
    one = Content("circle", "red", "large", "left", 1, "striped")
    three = Content("cross", "orange", "small", None, 3, "plain")
    assert one.caption() == "a large red circle on the left on a striped background"
    assert three.caption() == "three small orange crosses on a plain background"
    assert caption(one, ("colour", "shape")) == "a red circle"
    assert caption(three, ("colour",)) == "three orange shapes"
    assert caption(Content("star", "orange", "small", "top", 1, "plain"), ("colour",)) == (
        "an orange shape"
    )


def _share_of(picture: Image.Image, colour: tuple[int, int, int]) -> float:
    pixels = np.asarray(picture, dtype=np.int32)
    close = np.abs(pixels - np.array(colour)).max(axis=-1) <= 20
    return float(close.mean())


def test_the_picture_shows_its_colour_size_and_place() -> None:
    rng = np.random.default_rng(0)
    large = render(Content("square", "blue", "large", "left", 1, "plain"), rng)
    small = render(Content("square", "blue", "small", "left", 1, "plain"), rng)
    assert _share_of(large, COLOURS["blue"]) > 2 * _share_of(small, COLOURS["blue"]) > 0
    pixels = np.abs(np.asarray(large, dtype=np.int32) - np.array(COLOURS["blue"])).max(-1) <= 20
    half = pixels.shape[1] // 2
    assert pixels[:, :half].sum() > 10 * max(1, pixels[:, half:].sum())
    assert _share_of(large, COLOURS["red"]) == 0


def test_titles_and_tags_do_not_define_the_truth() -> None:
    photos = generate(400)
    named = [
        p.content.shape in words(p.title + " " + " ".join(p.tags))
        and p.content.colour in words(p.title + " " + " ".join(p.tags))
        for p in photos
    ]
    # Some photos are described by both words, most are not: keyword search finds a part.
    assert 0.05 < sum(named) / len(photos) < 0.6


def test_grades_come_from_the_content() -> None:
    query = Query("q", "a red circle", {"shape": "circle", "colour": "red"})
    assert query.grade(Content("circle", "red", "small", None, 2, "dotted")) == 2
    assert query.grade(Content("circle", "blue", "small", "top", 1, "plain")) == 1
    assert query.grade(Content("square", "red", "small", "top", 1, "plain")) == 0
    count = Query("q", "two circles", {"count": 2, "shape": "circle"})
    assert count.grade(Content("circle", "red", "small", None, 3, "dotted")) == 1


def test_judgement_files_have_the_loader_format(tmp_path: Path) -> None:
    photos = generate(60, seed=2)
    kept = write_judgements(photos, tmp_path)
    rows = [line.split("\t") for line in (tmp_path / QUERIES_FILE).read_text().splitlines()]
    assert [(r[0], r[1], r[2]) for r in rows] == [(q.id, q.text, q.tags) for q in kept]
    ids = {p.id for p in photos}
    by_id = {p.id: p for p in photos}
    queries = {q.id: q for q in QUERIES}
    for line in (tmp_path / QRELS_FILE).read_text().splitlines():
        qid, zero, pid, grade = line.split(" ")
        assert zero == "0" and pid in ids
        assert queries[qid].grade(by_id[pid].content) == int(grade) > 0


def test_the_committed_judgements_are_the_default_sets(tmp_path: Path) -> None:
    write_judgements(generate(), tmp_path)
    for name in (QUERIES_FILE, QRELS_FILE):
        assert (tmp_path / name).read_text() == (SHIPPED / name).read_text(), name
    assert len((SHIPPED / QUERIES_FILE).read_text().splitlines()) == len(QUERIES)
