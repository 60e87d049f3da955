"""Judgement sets read and written; a bad file is refused with its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.quality.judgements import (
    JudgementError,
    JudgementSet,
    Query,
    load_judgements,
    write_judgements,
)


def _write(folder: Path, queries: str, qrels: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "queries.tsv").write_text(queries)
    (folder / "qrels.txt").write_text(qrels)
    return folder


def test_a_set_is_read_with_its_tags_and_grades(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "demo",
        "q1\ta cat\tanimal,indoor\n# a comment\n\nq2\tthe moon\n",
        "q1 0 cat-1 2\nq1 0 dog-1 0\nq2 0 moon 1\n",
    )
    found = load_judgements(folder)
    assert found.name == "demo"
    assert found.queries == (Query("q1", "a cat", ("animal", "indoor")), Query("q2", "the moon"))
    assert found.qrels == {"q1": {"cat-1": 2, "dog-1": 0}, "q2": {"moon": 1}}
    assert found.grades("q3") == {}


def test_a_written_set_reads_back_the_same(tmp_path: Path) -> None:
    written = JudgementSet(
        "mine",
        (Query("a", "red circle", ("shape", "colour")), Query("b", "two squares")),
        {"a": {"p1": 2, "p2": 1}, "b": {"p3": 1}},
    )
    write_judgements(tmp_path / "mine", written)
    assert load_judgements(tmp_path / "mine") == written


@pytest.mark.parametrize(
    ("queries", "qrels", "message"),
    [
        ("q1\n", "", r"queries.tsv:1: expected 'id<TAB>text"),
        ("q1\ta cat\nq1\ta dog\n", "", r"queries.tsv:2: query id 'q1' appears twice"),
        ("# nothing\n", "", r"queries.tsv: holds no query"),
        ("q1\ta cat\n", "\nq1 0 cat\n", r"qrels.txt:2: expected 'qid 0 photo_id grade'"),
        ("q1\ta cat\n", "q1 0 cat high\n", r"qrels.txt:1: grade 'high' is not an integer"),
        ("q1\ta cat\n", "q1 0 cat -1\n", r"qrels.txt:1: grade -1 is negative"),
        ("q1\ta cat\n", "q9 0 cat 1\n", r"qrels.txt:1: query id 'q9' is not in queries.tsv"),
        ("q1\ta cat\n", "q1 0 cat 1\nq1 0 cat 2\n", r"qrels.txt:2: q1 cat is judged twice"),
    ],
)
def test_a_bad_file_is_refused_with_its_line(
    tmp_path: Path, queries: str, qrels: str, message: str
) -> None:
    with pytest.raises(JudgementError, match=message):
        load_judgements(_write(tmp_path / "bad", queries, qrels))


def test_a_missing_folder_or_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(JudgementError, match="not a folder"):
        load_judgements(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "queries.tsv").write_text("q1\ta cat\n")
    with pytest.raises(JudgementError, match=r"has no qrels\.txt"):
        load_judgements(tmp_path / "half")


def test_a_text_holding_a_separator_is_not_written(tmp_path: Path) -> None:
    bad = JudgementSet("bad", (Query("q", "a\tb"),), {})
    with pytest.raises(JudgementError, match="separator"):
        write_judgements(tmp_path / "bad", bad)
    assert not (tmp_path / "bad").exists()
