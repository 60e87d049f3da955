"""Qdrant Edge's filters for the store's queries: search filters, a shard, identities, keys."""

from __future__ import annotations

from collections.abc import Sequence

import qdrant_edge as qe

from core.vectorstore.base import KEY_FIELD, SHARD_FIELD, SearchFilter, point_id


def search_filter(f: SearchFilter) -> qe.Filter | None:
    """The Edge filter of a SearchFilter; None when it has no condition."""
    must: list[qe.ConditionType] = []
    if f.tags_any:
        must.append(qe.FieldCondition(key="tags", match=qe.MatchAny(list(f.tags_any))))
    must.extend(qe.FieldCondition(key="tags", match=qe.MatchValue(tag)) for tag in f.tags_all)
    if f.photographer is not None:
        must.append(qe.FieldCondition(key="photographer", match=qe.MatchValue(f.photographer)))
    if f.license is not None:
        must.append(qe.FieldCondition(key="license", match=qe.MatchValue(f.license)))
    if f.created_from is not None or f.created_to is not None:
        since = f.created_from.isoformat() if f.created_from is not None else None
        until = f.created_to.isoformat() if f.created_to is not None else None
        must.append(
            qe.FieldCondition(key="created_at", range=qe.RangeDateTime(gte=since, lte=until))
        )
    must_not: list[qe.ConditionType] = []
    if f.exclude_ids:
        must_not.append(qe.HasIdCondition({point_id(pid) for pid in f.exclude_ids}))
    if not must and not must_not:
        return None
    return qe.Filter(must=must or None, must_not=must_not or None)


def shard_condition(shard: str | None) -> qe.ConditionType:
    """The points labelled with a shard; None: those without a label."""
    if shard is None:
        return qe.IsEmptyCondition(SHARD_FIELD)
    return qe.FieldCondition(key=SHARD_FIELD, match=qe.MatchValue(shard))


def shard_filter(shard: str | None, *, unlabelled: bool = False) -> qe.Filter | None:
    """points(): one shard's, the unlabelled ones, or every point (None)."""
    if unlabelled:
        return qe.Filter(must=[shard_condition(None)])
    return None if shard is None else qe.Filter(must=[shard_condition(shard)])


def in_shard(shard: str | None, photo_ids: Sequence[str]) -> qe.Filter:
    """These photos, while they still carry this label."""
    ids: set[qe.PointId] = {point_id(pid) for pid in photo_ids}
    return qe.Filter(must=[qe.HasIdCondition(ids), shard_condition(shard)])


def with_keys(keys: Sequence[str]) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition(key=KEY_FIELD, match=qe.MatchAny(list(keys)))])
