"""The store's neutral requests (core/vectorstore/engine.py) in Qdrant Edge's classes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import qdrant_edge as qe

from core.payload import as_json
from core.vectorstore.base import SearchTuning, SparseVector
from core.vectorstore.boosts import CREATED, DEFAULTS, POPULARITY
from core.vectorstore.engine import (
    Boosted,
    DateRange,
    DeletePoints,
    DeleteVectors,
    Flag,
    HasIds,
    HasVector,
    IsEmpty,
    Leaf,
    Match,
    Nearest,
    Prefetch,
    Range,
    Recommend,
    Rrf,
    Scroll,
    Search,
    SetPayload,
    SetVectors,
    Upsert,
    Where,
    Write,
    filter_of,
    vectors,
)
from core.vectorstore.filters import walking


def _id_list(ids: Iterable[str]) -> list[qe.PointId]:
    return list(ids)


def sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def vector(v: list[float] | SparseVector) -> list[float] | qe.SparseVector:
    return sparse(v) if isinstance(v, SparseVector) else v


def condition(c: Leaf) -> qe.ConditionType:
    match c:
        case Match(field, (value,)):
            return qe.FieldCondition(key=field, match=qe.MatchValue(value))
        case Match(field, values):
            return qe.FieldCondition(key=field, match=qe.MatchAny(list(values)))
        case DateRange(field, since, until):
            bounds = qe.RangeDateTime(
                gte=None if since is None else since.isoformat(),
                lte=None if until is None else until.isoformat(),
            )
            return qe.FieldCondition(key=field, range=bounds)
        case Range(field, gte, lte):
            return qe.FieldCondition(key=field, range=qe.RangeFloat(gte=gte, lte=lte))
        case Flag(field, value):
            return qe.FieldCondition(key=field, match=qe.MatchValue(int(value)))
        case HasIds(ids):
            return qe.HasIdCondition(set(_id_list(ids)))
        case IsEmpty(field):
            return qe.IsEmptyCondition(field)
        case HasVector(name):
            return qe.HasVectorCondition(name)


def where(w: Where | None) -> qe.Filter | None:
    return filter_of(w, condition, qe.Filter)


def params(tuning: SearchTuning | None, w: Where | None) -> qe.SearchParams | None:
    """The search parameters of a search under its filter (filters.walking: ACORN or not)."""
    tuning = walking(tuning, w)
    return (
        None
        if tuning is None
        else tuning.params(qe.SearchParams, qe.QuantizationSearchParams, qe.AcornSearchParams)
    )


def query(q: Nearest | Recommend | Rrf | Boosted) -> qe.ScoringQueryType:
    match q:
        case Boosted():
            return formula(q)
        case Nearest(v, using):
            return qe.Query.Nearest(vector(v), using=using)
        case Recommend(positive, negative, using):
            examples = qe.RecommendQuery(list(positive), list(negative))
            return qe.Query.RecommendBestScore(examples, using=using)
        case Rrf(k, weights):
            # The stub's union names Fusion, whose Rrf is what the engine takes.
            given = None if weights is None else list(weights)
            return cast(qe.Fusion, qe.Fusion.Rrf(k=k, weights=given))


def formula(b: Boosted) -> qe.Formula:
    """Boosted as Qdrant's formula (core/vectorstore/boosts.py evaluates the same in Python)."""
    e = qe.Expression
    age = e.Decay(
        qe.DecayKind.Exp,
        e.DatetimeKey(CREATED),
        target=e.Datetime(b.now.isoformat()),
        midpoint=0.5,
        scale=b.recency_half_life_s,
    )
    # The default date only keeps the decay defined: the condition makes the term 0.
    dated = e.Condition(qe.Filter(must_not=[qe.IsEmptyCondition(CREATED)]))
    p = e.Variable(POPULARITY)
    share = e.Div(p, e.Sum([p, e.Constant(b.popularity_half)]), by_zero_default=0.0)
    recency = e.Mult([e.Constant(b.recency_weight), dated, age])
    popular = e.Mult([e.Constant(b.popularity_weight), share])
    return qe.Formula(e.Sum([e.Variable("$score"), recency, popular]), defaults=DEFAULTS)


def payload(fields: Sequence[str] | None) -> qe.PayloadSelector | bool:
    return True if fields is None else qe.PayloadSelector.Include(list(fields))


def prefetch(p: Prefetch) -> qe.Prefetch:
    return qe.Prefetch(
        limit=p.limit,
        query=query(p.query),
        prefetches=[prefetch(n) for n in p.prefetches] or None,
        filter=where(p.filter),
        score_threshold=p.score_threshold,
        params=params(p.tuning, p.filter),
    )


def search(s: Search) -> qe.QueryRequest:
    return qe.QueryRequest(
        limit=s.limit,
        offset=s.offset,
        query=query(s.query),
        prefetches=[prefetch(p) for p in s.prefetches] or None,
        filter=where(s.filter),
        score_threshold=s.score_threshold,
        with_payload=payload(s.fields),
        with_vector=vectors(s.with_vector),
        params=params(s.tuning, s.filter),
    )


def scroll(s: Scroll) -> qe.ScrollRequest:
    offset: qe.PointId | None = s.offset  # type: ignore[assignment]  # the engine's own
    return qe.ScrollRequest(
        offset=offset,
        limit=s.limit,
        filter=where(s.filter),
        with_payload=payload(s.fields),
        with_vector=vectors(s.with_vector),
    )


def write(w: Write) -> qe.UpdateOperation:
    match w:
        case Upsert(points):
            batch = [
                qe.Point(
                    p.point_id, {n: vector(v) for n, v in p.vectors.items()}, as_json(p.payload)
                )
                for p in points
            ]
            return qe.UpdateOperation.upsert_points(batch)
        case SetPayload(ids, fields):
            return qe.UpdateOperation.set_payload(_id_list(ids), as_json(fields))
        case SetVectors(by_point):
            found = [
                qe.PointVectors(pid, {n: sparse(v) for n, v in named.items()})
                for pid, named in by_point.items()
            ]
            return qe.UpdateOperation.update_vectors(found)
        case DeleteVectors(ids, names):
            return qe.UpdateOperation.delete_vectors(_id_list(ids), list(names))
        case DeletePoints(ids, None):
            return qe.UpdateOperation.delete_points(_id_list(ids))
        case DeletePoints(_, Where() as matching):
            return qe.UpdateOperation.delete_points_by_filter(
                filter_of(matching, condition, qe.Filter)
            )
    raise TypeError(f"not a write: {w!r}")
