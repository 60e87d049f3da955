"""The judgement set of synthetic photos: queries of described attributes, graded on content.

queries.tsv holds `id<TAB>text<TAB>tags` (no header; tags name the attributes the query
describes, comma-separated); qrels.txt holds TREC lines `qid 0 photo_id grade`. A photo is
graded 2 when it shows everything the query describes, 1 when it shows the query's shape but
not the rest (the right thing, a wrong detail), and is left out (0) otherwise. The grades come
from each photo's content record, never from its title or tags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.atomicfile import write_atomic
from model.synthetic import (
    DEFAULT_COUNT,
    DEFAULT_SEED,
    Content,
    SyntheticPhoto,
    generate,
    write_photos,
)

QUERIES_FILE = "queries.tsv"
QRELS_FILE = "qrels.txt"


@dataclass(frozen=True)
class Query:
    """A query's text and the attributes (content field -> value) it describes."""

    id: str
    text: str
    wants: Mapping[str, object]

    @property
    def tags(self) -> str:
        return ",".join(self.wants)

    def grade(self, content: Content) -> int:
        matched = {k for k, v in self.wants.items() if getattr(content, k) == v}
        if len(matched) == len(self.wants):
            return 2
        if len(self.wants) > 1 and "shape" in matched:
            return 1
        return 0


def _q(number: int, text: str, **wants: object) -> Query:
    return Query(f"syn-{number:02d}", text, wants)


_SHAPE_COLOUR = (
    ("red", "circle"), ("blue", "square"), ("green", "triangle"), ("yellow", "star"),
    ("orange", "diamond"), ("purple", "cross"), ("white", "circle"), ("black", "star"),
    ("red", "triangle"), ("blue", "circle"), ("green", "square"), ("yellow", "diamond"),
    ("orange", "star"), ("purple", "circle"), ("white", "square"), ("black", "triangle"),
)  # fmt: skip

QUERIES: tuple[Query, ...] = (
    *(
        _q(n, f"{'an' if c == 'orange' else 'a'} {c} {s}", shape=s, colour=c)
        for n, (c, s) in enumerate(_SHAPE_COLOUR, start=1)
    ),
    _q(17, "a circle", shape="circle"),
    _q(18, "a square", shape="square"),
    _q(19, "a triangle", shape="triangle"),
    _q(20, "a star", shape="star"),
    _q(21, "a diamond", shape="diamond"),
    _q(22, "a cross", shape="cross"),
    _q(23, "a red shape", colour="red"),
    _q(24, "a blue shape", colour="blue"),
    _q(25, "a yellow shape", colour="yellow"),
    _q(26, "a black shape", colour="black"),
    _q(27, "two circles", count=2, shape="circle"),
    _q(28, "three stars", count=3, shape="star"),
    _q(29, "two squares", count=2, shape="square"),
    _q(30, "three triangles", count=3, shape="triangle"),
    _q(31, "a circle on the left", position="left", shape="circle"),
    _q(32, "a square on the right", position="right", shape="square"),
    _q(33, "a star at the top", position="top", shape="star"),
    _q(34, "a triangle at the bottom", position="bottom", shape="triangle"),
    _q(35, "a small circle", size="small", shape="circle"),
    _q(36, "a large star", size="large", shape="star"),
    _q(37, "a large square", size="large", shape="square"),
    _q(38, "a shape on a striped background", texture="striped"),
    _q(39, "a shape on a dotted background", texture="dotted"),
    _q(40, "a shape on a checked background", texture="checked"),
)


def grades(query: Query, photos: Sequence[SyntheticPhoto]) -> dict[str, int]:
    """Each photo's grade for `query` above 0, by photo id."""
    found = {p.id: query.grade(p.content) for p in photos}
    return {pid: g for pid, g in found.items() if g > 0}


def write_judgements(
    photos: Sequence[SyntheticPhoto], out_dir: Path, queries: Sequence[Query] = QUERIES
) -> list[Query]:
    """Write queries.tsv and qrels.txt for `photos`; a query no photo fully matches is left out
    (its figures would be undefined). Returns the queries written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kept: list[Query] = []
    qrels: list[str] = []
    for query in queries:
        graded = grades(query, photos)
        if 2 not in graded.values():
            continue
        kept.append(query)
        for pid, grade in sorted(graded.items(), key=lambda item: (-item[1], item[0])):
            qrels.append(f"{query.id} 0 {pid} {grade}\n")
    write_atomic(out_dir / QUERIES_FILE, "".join(f"{q.id}\t{q.text}\t{q.tags}\n" for q in kept))
    write_atomic(out_dir / QRELS_FILE, "".join(qrels))
    return kept


# The default set's judgements, committed so that they ship: `photosearch model synthetic`
# writes the same files beside the photos (a unit test keeps them equal).
SHIPPED = Path(__file__).parent / "judgements" / "synthetic"


@dataclass(frozen=True)
class SyntheticSet:
    """A written synthetic set: the folder to index and its judgement set."""

    photos: Path
    judgements: Path
    count: int
    queries: int


def write_set(out: Path, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> SyntheticSet:
    """OUT/photos (PNG files and photos.jsonl) and OUT/judgements (queries.tsv, qrels.txt)."""
    photos = generate(count, seed)
    write_photos(photos, out / "photos")
    kept = write_judgements(photos, out / "judgements")
    return SyntheticSet(out / "photos", out / "judgements", len(photos), len(kept))
