"""qdrant-client's filters for the store's queries: search filters, a shard, identities, keys."""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import models as qm

from core.vectorstore.base import KEY_FIELD, SHARD_FIELD, SearchFilter, point_id


def search_filter(f: SearchFilter) -> qm.Filter | None:
    """The Qdrant filter of a SearchFilter; None when it has no condition."""
    must: list[qm.Condition] = []
    if f.tags_any:
        must.append(qm.FieldCondition(key="tags", match=qm.MatchAny(any=list(f.tags_any))))
    must.extend(qm.FieldCondition(key="tags", match=qm.MatchValue(value=tag)) for tag in f.tags_all)
    if f.photographer is not None:
        must.append(
            qm.FieldCondition(key="photographer", match=qm.MatchValue(value=f.photographer))
        )
    if f.license is not None:
        must.append(qm.FieldCondition(key="license", match=qm.MatchValue(value=f.license)))
    if f.created_from is not None or f.created_to is not None:
        window = qm.DatetimeRange(gte=f.created_from, lte=f.created_to)
        must.append(qm.FieldCondition(key="created_at", range=window))
    must_not: list[qm.Condition] = []
    if f.exclude_ids:
        must_not.append(qm.HasIdCondition(has_id=[point_id(pid) for pid in f.exclude_ids]))
    if not must and not must_not:
        return None
    return qm.Filter(must=must or None, must_not=must_not or None)


def shard_condition(shard: str | None) -> qm.Condition:
    """The points labelled with a shard; None: those without a label."""
    if shard is None:
        return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=SHARD_FIELD))
    return qm.FieldCondition(key=SHARD_FIELD, match=qm.MatchValue(value=shard))


def shard_filter(shard: str | None, *, unlabelled: bool = False) -> qm.Filter | None:
    """points(): one shard's, the unlabelled ones, or every point (None)."""
    if unlabelled:
        return qm.Filter(must=[shard_condition(None)])
    return None if shard is None else qm.Filter(must=[shard_condition(shard)])


def in_shard(shard: str | None, photo_ids: Sequence[str]) -> qm.Filter:
    """These photos, while they still carry this label."""
    ids = qm.HasIdCondition(has_id=[point_id(pid) for pid in photo_ids])
    return qm.Filter(must=[ids, shard_condition(shard)])


def with_keys(keys: Sequence[str]) -> qm.Filter:
    return qm.Filter(must=[qm.FieldCondition(key=KEY_FIELD, match=qm.MatchAny(any=list(keys)))])
