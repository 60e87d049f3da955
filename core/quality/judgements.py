"""Judgement sets on disk: queries.tsv (id, text, comma-separated tags) and qrels.txt (TREC:
"qid 0 photo_id grade"), read and written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from core.atomicfile import write_atomic

# The judgement sets PhotoSearch ships: the demo photos' (core/demo.py) under demo/.
SETS = Path(__file__).parent / "sets"
QUERIES = "queries.tsv"
QRELS = "qrels.txt"


class JudgementError(ValueError):
    """A judgement set's files are missing or malformed; the message names file:line."""


@dataclass(frozen=True)
class Query:
    """One query of a set: its id, its text, and tags that group queries in a report."""

    id: str
    text: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class JudgementSet:
    """Queries and their graded judgements: qid -> photo id -> grade (> 0: relevant)."""

    name: str
    queries: tuple[Query, ...]
    qrels: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def grades(self, query_id: str) -> Mapping[str, int]:
        """The judged photos of one query (empty: none judged)."""
        return self.qrels.get(query_id, MappingProxyType({}))


def _queries(path: Path) -> tuple[Query, ...]:
    found: list[Query] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{path}:{number}"
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) not in (2, 3):
            raise JudgementError(
                f"{where}: expected 'id<TAB>text[<TAB>tags,comma,separated]', got {line!r}"
            )
        qid, text = cells[0].strip(), cells[1].strip()
        if not qid or not text:
            raise JudgementError(f"{where}: a query needs an id and a text")
        if qid in seen:
            raise JudgementError(f"{where}: query id {qid!r} appears twice")
        seen.add(qid)
        tags = tuple(t.strip() for t in cells[2].split(",") if t.strip()) if len(cells) == 3 else ()
        found.append(Query(qid, text, tags))
    if not found:
        raise JudgementError(f"{path}: holds no query")
    return tuple(found)


def _qrels(path: Path, known: set[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{path}:{number}"
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split()
        if len(cells) != 4:
            raise JudgementError(f"{where}: expected 'qid 0 photo_id grade', got {line!r}")
        qid, _, photo_id, grade_text = cells
        try:
            grade = int(grade_text)
        except ValueError:
            raise JudgementError(f"{where}: grade {grade_text!r} is not an integer") from None
        if grade < 0:
            raise JudgementError(f"{where}: grade {grade} is negative (0: judged not relevant)")
        if qid not in known:
            raise JudgementError(f"{where}: query id {qid!r} is not in {QUERIES}")
        judged = qrels.setdefault(qid, {})
        if photo_id in judged:
            raise JudgementError(f"{where}: {qid} {photo_id} is judged twice")
        judged[photo_id] = grade
    return qrels


def load_judgements(path: Path) -> JudgementSet:
    """The set in the folder `path` (its name: the folder's); JudgementError on bad files."""
    if not path.is_dir():
        raise JudgementError(f"{path}: not a folder holding {QUERIES} and {QRELS}")
    for name in (QUERIES, QRELS):
        if not (path / name).is_file():
            raise JudgementError(f"{path}: has no {name}")
    queries = _queries(path / QUERIES)
    qrels = _qrels(path / QRELS, {q.id for q in queries})
    return JudgementSet(path.resolve().name, queries, qrels)


def write_judgements(path: Path, judgements: JudgementSet) -> None:
    """Write the set into the folder `path` (made if missing), each file atomically."""
    for query in judgements.queries:
        if "\t" in query.text or "\n" in query.text or any("," in t for t in query.tags):
            raise JudgementError(f"query {query.id!r}: a text or tag holds a separator")
    path.mkdir(parents=True, exist_ok=True)
    queries = "".join(f"{q.id}\t{q.text}\t{','.join(q.tags)}\n" for q in judgements.queries)
    qrels = "".join(
        f"{qid} 0 {photo_id} {grade}\n"
        for qid, judged in judgements.qrels.items()
        for photo_id, grade in judged.items()
    )
    write_atomic(path / QUERIES, queries.encode())
    write_atomic(path / QRELS, qrels.encode())
