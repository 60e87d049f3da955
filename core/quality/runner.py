"""A judgement set run against a ranking: each query's metrics, their means with bootstrap
intervals (overall and per tag), and two evaluations of one set compared query by query.

`collection_ranker` ranks as the API's default text search does (the same store calls, the
same fusion, near-duplicates collapsed), so an evaluation measures what a searcher sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from core.embedding.arrays import Embeddings
from core.embedding.manifest import SearchCalibration
from core.keywords import query_vector
from core.quality.judgements import JudgementSet, Query
from core.quality.metrics import Interval, bootstrap, mrr_at, ndcg_at, paired_difference, recall_at
from core.querycache import normalize_query
from core.vectorstore import GROUP_FIELD, Hit, VectorStore, model_version_of

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = get_args(Mode)
METRICS = ("ndcg", "recall", "mrr")
# The API's defaults: reciprocal rank fusion's constant (query_api.search.ranking.RRF_K) and the
# candidates a collapsed page is chosen from (PHOTOSEARCH_API__RERANK_POOL).
RRF_K = 60
POOL = 100


@dataclass(frozen=True)
class QueryScore:
    """One query's metrics at the cut-off and the photo ids it ranked there."""

    query: Query
    ndcg: float
    recall: float
    mrr: float
    ranked: tuple[str, ...]


def score(
    judgements: JudgementSet, rank: Callable[[Query], Sequence[str]], k: int = 10
) -> list[QueryScore]:
    """Each query ranked and measured at k. A query with no photo judged relevant measures
    nothing (every ranking scores 0 on it) and is left out, as trec_eval leaves it out."""
    scores: list[QueryScore] = []
    for query in judgements.queries:
        grades = judgements.grades(query.id)
        if not any(g > 0 for g in grades.values()):
            continue
        ranked = tuple(dict.fromkeys(rank(query)))[:k]
        scores.append(
            QueryScore(
                query,
                ndcg_at(ranked, grades, k),
                recall_at(ranked, grades, k),
                mrr_at(ranked, grades, k),
                ranked,
            )
        )
    return scores


def _collapsed(hits: Sequence[Hit]) -> list[str]:
    """The best-ranked photo of each near-duplicate group (query_api.search.ranking.collapse)."""
    seen: set[str] = set()
    kept: list[str] = []
    for hit in hits:
        group = str(hit.payload.get(GROUP_FIELD) or hit.photo_id)
        if group not in seen:
            seen.add(group)
            kept.append(hit.photo_id)
    return kept


def collection_ranker(
    store: VectorStore,
    collection: str,
    *,
    embed: Callable[[Sequence[str], int], Embeddings],
    mode: Mode,
    k: int = 10,
    pool: int = POOL,
    calibration: SearchCalibration | None = None,
    collapse: bool = True,
) -> Callable[[Query], Sequence[str]]:
    """A query's first k photo ids in `collection` (an alias is resolved once, now), ranked as
    the API's text search ranks them with its defaults: the query embedded with the
    collection's own model version (`embed(texts, version)`), the `pool` nearest and the
    `pool` best by keywords fused by the store (hybrid: with the version's `calibration`, its
    manifest's, as the API fuses; none, plain RRF), or either alone; then one photo per
    near-duplicate group (`collapse`, the API's default). KeywordsUnavailable from a keyword
    ranking of a collection without keyword vectors; hybrid then ranks by vector, as the API
    does."""
    from core.vectorstore import KeywordsUnavailable

    name = store.resolve(collection)
    version = model_version_of(name)
    depth = max(pool, k + 1)

    def vector_of(query: Query) -> Embeddings:
        vectors = embed([normalize_query(query.text)], version)
        return np.asarray(vectors[0], dtype=np.float32)

    def hits(query: Query) -> list[Hit]:
        if mode == "keyword":
            return store.keyword_search(name, query_vector(query.text), limit=depth)
        if mode == "vector":
            return store.search(name, vector_of(query), limit=depth)
        vector = vector_of(query)
        try:
            return store.hybrid_search(
                name,
                vector,
                query_vector(query.text),
                limit=depth,
                rrf_k=RRF_K if calibration is None else calibration.rrf_k,
                keyword_weight=1.0 if calibration is None else calibration.keyword_weight,
            )
        except KeywordsUnavailable:
            return store.search(name, vector, limit=depth)

    def rank(query: Query) -> Sequence[str]:
        # Photos tied in score by photo id, as the store's fusion orders them: Qdrant Edge
        # returns ties (common in BM25) in no fixed order, and a figure must not move with it.
        found = sorted(hits(query), key=lambda h: (-h.score, h.photo_id))
        ids = _collapsed(found) if collapse else [h.photo_id for h in found]
        return ids[:k]

    return rank


@dataclass(frozen=True)
class Evaluation:
    """One judgement set run against one collection in one mode."""

    judgements: str
    collection: str
    mode: Mode
    per_query: list[QueryScore]
    ndcg: Interval
    recall: Interval
    mrr: Interval
    by_tag: dict[str, tuple[Interval, Interval, Interval]]
    samples: int = 1000
    seed: int = 0

    def metric(self, name: str) -> Interval:
        """ndcg, recall or mrr."""
        found: Interval = getattr(self, name)
        return found


def _intervals(
    scores: Sequence[QueryScore], samples: int, seed: int
) -> tuple[Interval, Interval, Interval]:
    if not scores:
        nothing = Interval(0.0, 0.0, 0.0)
        return nothing, nothing, nothing
    return (
        bootstrap([s.ndcg for s in scores], samples=samples, seed=seed),
        bootstrap([s.recall for s in scores], samples=samples, seed=seed),
        bootstrap([s.mrr for s in scores], samples=samples, seed=seed),
    )


def evaluate(
    judgements: JudgementSet,
    rank: Callable[[Query], Sequence[str]],
    *,
    collection: str,
    mode: Mode,
    samples: int = 1000,
    seed: int = 0,
    k: int = 10,
) -> Evaluation:
    """The set's queries ranked and measured at k, with seeded bootstrap intervals over the
    queries, and over each tag's queries."""
    per_query = score(judgements, rank, k)
    tags = sorted({t for s in per_query for t in s.query.tags})
    by_tag = {
        tag: _intervals([s for s in per_query if tag in s.query.tags], samples, seed)
        for tag in tags
    }
    ndcg, recall, mrr = _intervals(per_query, samples, seed)
    return Evaluation(
        judgements.name, collection, mode, per_query, ndcg, recall, mrr, by_tag, samples, seed
    )


def compare(a: Evaluation, b: Evaluation, *, tag: str | None = None) -> dict[str, Interval]:
    """Each metric's paired difference b - a over the queries both measured (those of `tag`
    alone, if given), with its bootstrap interval (a's samples and seed): an interval above
    0 throughout says b ranks better."""
    if a.judgements != b.judgements:
        raise ValueError(f"{a.judgements} and {b.judgements} are different judgement sets")
    theirs = {s.query.id: s for s in b.per_query}
    pairs = [
        (s, theirs[s.query.id])
        for s in a.per_query
        if s.query.id in theirs and (tag is None or tag in s.query.tags)
    ]
    if not pairs:
        nothing = Interval(0.0, 0.0, 0.0)
        return dict.fromkeys(METRICS, nothing)
    return {
        metric: paired_difference(
            [getattr(x, metric) for x, _ in pairs],
            [getattr(y, metric) for _, y in pairs],
            samples=a.samples,
            seed=a.seed,
        )
        for metric in METRICS
    }


def to_dict(evaluation: Evaluation) -> dict[str, Any]:
    """The evaluation as JSON-able data (a worker's answer, `eval --json`)."""
    return {
        "judgements": evaluation.judgements,
        "collection": evaluation.collection,
        "mode": evaluation.mode,
        "samples": evaluation.samples,
        "seed": evaluation.seed,
        **{m: evaluation.metric(m).to_dict() for m in METRICS},
        "by_tag": {
            tag: dict(zip(METRICS, (i.to_dict() for i in three), strict=True))
            for tag, three in evaluation.by_tag.items()
        },
        "per_query": [
            {
                "id": s.query.id,
                "text": s.query.text,
                "tags": list(s.query.tags),
                "ndcg": s.ndcg,
                "recall": s.recall,
                "mrr": s.mrr,
                "ranked": list(s.ranked),
            }
            for s in evaluation.per_query
        ],
    }


def _interval_of(data: dict[str, Any]) -> Interval:
    return Interval(float(data["mean"]), float(data["low"]), float(data["high"]))


def from_dict(data: dict[str, Any]) -> Evaluation:
    """The evaluation `to_dict` gave."""
    per_query = [
        QueryScore(
            Query(q["id"], q["text"], tuple(q["tags"])),
            float(q["ndcg"]),
            float(q["recall"]),
            float(q["mrr"]),
            tuple(q["ranked"]),
        )
        for q in data["per_query"]
    ]
    by_tag = {
        tag: (_interval_of(m["ndcg"]), _interval_of(m["recall"]), _interval_of(m["mrr"]))
        for tag, m in data["by_tag"].items()
    }
    return Evaluation(
        data["judgements"],
        data["collection"],
        data["mode"],
        per_query,
        _interval_of(data["ndcg"]),
        _interval_of(data["recall"]),
        _interval_of(data["mrr"]),
        by_tag,
        int(data["samples"]),
        int(data["seed"]),
    )
