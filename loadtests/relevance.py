"""How well rankings find what a query names: queries made from the demo photos' metadata,
which photos are relevant to each, MRR and recall at 10, and fusions of two rankings other than
the API's (loadtests/bench_search.py asks the API for the rankings)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from core.demo import DemoPhoto
from core.keywords import words
from core.vectorstore import Hit
from query_api.ranking import RRF_K, fuse

AT = 10  # MRR@10, recall@10
QUERY_SEED = 0
KINDS = ("title", "two tags", "title word + tag")
ACCENTS = str.maketrans("aeiouAEIOU", "áéíóúÁÉÍÓÚ")


@dataclass(frozen=True)
class Query:
    text: str
    kind: str
    altered: bool  # case or accents changed from the metadata's
    relevant: frozenset[str]  # photo ids


def photo_words(photo: DemoPhoto) -> set[str]:
    return {w for text in (photo.title, *photo.tags) for w in words(text)}


def alter(text: str, i: int) -> str:
    """Every other query in capitals or with accents on its vowels, by turns: keyword search
    ignores both (core.keywords), a text encoder may not."""
    return text.upper() if i % 4 == 1 else text.translate(ACCENTS) if i % 4 == 3 else text


def demo_queries(photos: Sequence[DemoPhoto]) -> list[Query]:
    """Queries from each photo's metadata; one per set of words (two motorcycle views share
    their tags)."""
    r = random.Random(QUERY_SEED)
    made: list[tuple[str, str]] = []
    for photo in photos:
        title = words(photo.title)
        other_tags = [t for t in photo.tags if not set(words(t)) <= set(title)]
        made += [
            ("title", photo.title),
            ("two tags", " ".join(r.sample(photo.tags, 2))),
            ("title word + tag", f"{r.choice(title)} {r.choice(other_tags)}"),
        ]
    queries: list[Query] = []
    seen: set[frozenset[str]] = set()
    for kind, text in made:
        key = frozenset(words(text))
        if key in seen:
            continue
        seen.add(key)
        relevant = frozenset(p.id for p in photos if key <= photo_words(p))
        changed = alter(text, len(queries))
        queries.append(Query(changed, kind, changed != text, relevant))
    return queries


def reciprocal_rank(ranking: Sequence[str], relevant: frozenset[str]) -> float:
    return next((1 / r for r, pid in enumerate(ranking[:AT], 1) if pid in relevant), 0.0)


def recall(ranking: Sequence[str], relevant: frozenset[str]) -> float:
    return len(set(ranking[:AT]) & relevant) / len(relevant)


def chance_rr(photos: int, relevant: int) -> float:
    """Expected RR@AT of a random order: P(first relevant at rank r) = C(n-r, m-1) / C(n, m)."""
    total = math.comb(photos, relevant)
    return sum(
        math.comb(photos - r, relevant - 1) / total / r for r in range(1, min(AT, photos) + 1)
    )


def weighted(vector: Sequence[Hit], keyword: Sequence[Hit], w: float) -> list[str]:
    """(1 - w) x the vector score + w x the keyword score, each scaled to 0..1 over its list."""

    def scaled(hits: Sequence[Hit]) -> dict[str, float]:
        lo, hi = min((h.score for h in hits), default=0), max((h.score for h in hits), default=0)
        return {h.photo_id: (h.score - lo) / (hi - lo) if hi > lo else 1.0 for h in hits}

    total: dict[str, float] = {}
    for weight, scores in ((1 - w, scaled(vector)), (w, scaled(keyword))):
        for pid, score in scores.items():
            total[pid] = total.get(pid, 0.0) + weight * score
    return sorted(total, key=lambda pid: -total[pid])


def ids(hits: Sequence[Hit]) -> list[str]:
    return [h.photo_id for h in hits]


def ranked(answers: dict[str, list[Hit]]) -> dict[str, list[str]]:
    """Each row's ranking of one query, made of the API's answers in the three modes."""
    vector, keyword = answers["vector"], answers["keyword"]
    rows = {
        "keyword (API)": ids(keyword),
        "vector (API)": ids(vector),
        f"hybrid (API: RRF k={RRF_K})": ids(answers["hybrid"]),
    }
    for k in (10, RRF_K, 200):
        rows[f"RRF k={k} (here)"] = ids(fuse([vector, keyword], k))
    for w in (0.5, 0.8):
        rows[f"weighted, keyword {w:g} (here)"] = weighted(vector, keyword, w)
    return rows


def relevance_table(queries: Sequence[Query], found: Sequence[dict[str, list[Hit]]]) -> str:
    groups = {kind: [q.kind == kind for q in queries] for kind in KINDS}
    groups["case/accents changed"] = [q.altered for q in queries]
    groups = {"all": [True] * len(queries), **groups}
    lines = [
        f"| ranking | recall@{AT} | "
        + " | ".join(f"MRR@{AT}: {g} ({sum(m)})" for g, m in groups.items())
        + " |",
        "|---|---:|" + "---:|" * len(groups),
    ]

    def row(name: str, rr: list[float], rec: list[float]) -> str:
        means = [[v for v, m in zip(rr, mask, strict=True) if m] for mask in groups.values()]
        cells = " | ".join(f"{sum(m) / len(m):.3f}" if m else "-" for m in means)
        return f"| {name} | {sum(rec) / len(rec):.3f} | {cells} |"

    made = [ranked(answers) for answers in found]
    for name in made[0]:
        pairs = [(rows[name], q.relevant) for rows, q in zip(made, queries, strict=True)]
        lines.append(row(name, [reciprocal_rank(*p) for p in pairs], [recall(*p) for p in pairs]))
    n = len(found[0]["vector"])
    chance = [chance_rr(n, len(q.relevant)) for q in queries]
    lines.append(row("random order (chance)", chance, [min(1.0, AT / n)] * len(queries)))
    return "\n".join(lines)
