"""The click model on a recorded log equals the hand computation in the comments."""

from __future__ import annotations

from pathlib import Path

from core.feedback.clickmodel import count, judgements, query_id
from core.quality.judgements import load_judgements, write_judgements
from tests.unit.core.feedback.conftest import EVENTS, RECORDS


def test_examinations_clicks_and_downloads_follow_the_cascade() -> None:
    # "red car" (searches A-H): A examines a,b,c (last click c); B examines a; C a,b,c; D no
    # click, nothing; E the two skips d,e; F a,b,c,d; G the skip d; H showed nothing.
    photos = count(RECORDS, EVENTS)["red car"].photos
    counted = {p: (c.examined, c.clicked, c.downloaded) for p, c in photos.items()}
    assert counted == {
        "a": (4, 1, 1),  # A B C F; clicked in B, downloaded in B
        "b": (3, 1, 0),  # A C F; clicked in C
        "c": (3, 2, 0),  # A C F; clicked in A and C
        "d": (3, 1, 0),  # E F G; clicked in F
        "e": (1, 0, 0),  # E
    }


def test_the_grades_are_the_hand_computed_ones() -> None:
    made = judgements(RECORDS, EVENTS, min_sessions=3)
    # a: downloaded -> 2; b: 1/3 -> 1; c: 2/3 >= 0.5 -> 2; d: 1/3 -> 1; e: never clicked, none.
    # "blue boat" has two sessions, "unicorn" no click: neither is written.
    (query,) = made.queries
    assert (query.id, query.text, query.tags) == (query_id("red car"), "red car", ("clicks",))
    assert dict(made.grades(query.id)) == {"a": 2, "b": 1, "c": 2, "d": 1}


def test_fewer_sessions_admit_more_queries() -> None:
    made = judgements(RECORDS, EVENTS, min_sessions=2)
    assert [q.text for q in made.queries] == ["red car", "blue boat"]
    # I shows x, y and clicks y: both examined; J shows y first and clicks it: y alone.
    # y: examined 2, clicked 2 -> 2; x: examined 1, never clicked -> none.
    assert dict(made.grades(query_id("blue boat"))) == {"y": 2}


def test_the_set_is_written_as_the_judgement_loader_reads_it(tmp_path: Path) -> None:
    made = judgements(RECORDS, EVENTS, min_sessions=3)
    write_judgements(tmp_path / "clicks", made)
    assert (tmp_path / "clicks" / "qrels.txt").read_text().splitlines() == [
        f"{query_id('red car')} 0 {p} {g}" for p, g in [("a", 2), ("b", 1), ("c", 2), ("d", 1)]
    ]
    loaded = load_judgements(tmp_path / "clicks")
    assert loaded.queries == made.queries and loaded.qrels == made.qrels


def test_no_searches_make_an_empty_set() -> None:
    assert judgements([], []).queries == ()
