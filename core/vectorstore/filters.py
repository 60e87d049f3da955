"""The store's filters, engine-neutral: a search's metadata filter, a shard, identities, keys."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from core.embedding.attributes import SHARE_MIN
from core.vectorstore.base import KEY_FIELD, SHARD_FIELD, SearchFilter, SearchTuning, point_id
from core.vectorstore.engine import (
    Condition,
    DateRange,
    Flag,
    HasIds,
    HasVector,
    IsEmpty,
    Match,
    Range,
    Where,
)
from core.vectorstore.schema import PAYLOAD_INDEXES, subgraph_fields

# The fields whose filters walk their own payload subgraph (schema.py).
_WALKED = frozenset(subgraph_fields(PAYLOAD_INDEXES))


def search_filter(f: SearchFilter | None) -> Where | None:
    """The filter of a SearchFilter; None when it has no condition."""
    if f is None:
        return None
    must: list[Condition] = []
    if f.tags_any:
        must.append(Match("tags", f.tags_any))
    must.extend(Match("tags", (tag,)) for tag in f.tags_all)
    if f.photographer is not None:
        must.append(Match("photographer", (f.photographer,)))
    if f.license is not None:
        must.append(Match("license", (f.license,)))
    if f.created_from is not None or f.created_to is not None:
        must.append(DateRange("created_at", f.created_from, f.created_to))
    must.extend(_visual(f))
    must_not: tuple[Condition, ...] = ()
    if f.exclude_ids:
        must_not = (HasIds(frozenset(point_id(pid) for pid in f.exclude_ids)),)
    if not must and not must_not:
        return None
    return Where(tuple(must), must_not)


def _visual(f: SearchFilter) -> list[Condition]:
    """The conditions on automatic tags and visual attributes (core/embedding/attributes.py):
    a photo indexed before it had them matches none of them."""
    must: list[Condition] = [Match("auto_tags", (tag,)) for tag in f.auto_tags_all]
    if f.color is not None:
        # Shares under SHARE_MIN are not stored: a minimum of 0 is "any share recorded".
        least = max(f.color_min_share, SHARE_MIN)
        must.append(Range(f"color_shares.{f.color}", gte=least))
    if f.orientation is not None:
        must.append(Match("orientation", (f.orientation,)))
    if f.min_width is not None:
        must.append(Range("width", gte=f.min_width))
    if f.min_height is not None:
        must.append(Range("height", gte=f.min_height))
    if f.copy_space is not None:
        must.append(Flag("copy_space", f.copy_space))
    return must


def shard_condition(shard: str | None) -> Condition:
    """The points labelled with a shard; None: those without a label."""
    return IsEmpty(SHARD_FIELD) if shard is None else Match(SHARD_FIELD, (shard,))


def shard_filter(shard: str | None, *, unlabelled: bool = False) -> Where | None:
    """points(): one shard's, the unlabelled ones, or every point (None)."""
    if unlabelled:
        return Where((shard_condition(None),))
    return None if shard is None else Where((shard_condition(shard),))


def in_shard(shard: str | None, photo_ids: Sequence[str]) -> Where:
    """These photos, while they still carry this label."""
    ids = HasIds(frozenset(point_id(pid) for pid in photo_ids))
    return Where((ids, shard_condition(shard)))


def with_keys(keys: Sequence[str]) -> Where:
    return Where((Match(KEY_FIELD, tuple(keys)),))


def both(first: Condition, second: Where | None) -> Where:
    """A condition and, where there is one, a filter."""
    return Where((first,) if second is None else (first, second))


def _fields(w: Where) -> Iterator[str | None]:
    """The payload fields a filter's conditions read; None for a condition on no field that
    the graph could narrow (a vector's presence). Ids are left out: a search excludes a few."""
    for c in (*w.must, *w.must_not):
        match c:
            case Where():
                yield from _fields(c)
            case Match() | DateRange() | Range() | Flag() | IsEmpty():
                yield c.field
            case HasVector():
                yield None
            case HasIds():
                pass


def walking(tuning: SearchTuning | None, where: Where | None) -> SearchTuning | None:
    """The tuning a search walks the graph with under its filter: ACORN off where every field
    the filter reads has a payload subgraph, which finds its photos without it (ACORN there
    only costs time: 40-70 ms against 4-7 at 1e6, loadtests/bench_graph_recall.py)."""
    if tuning is None or not tuning.acorn or where is None:
        return tuning
    read = set(_fields(where))
    return replace(tuning, acorn=False) if read and read <= _WALKED else tuning
