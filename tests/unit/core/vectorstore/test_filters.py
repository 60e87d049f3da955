"""The store's engine-neutral filters, and the same filters as each engine's own classes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import qdrant_edge as qe
from qdrant_client import models as qm

from core.vectorstore import KEY_FIELD, SHARD_FIELD, SearchFilter, SearchTuning, point_id
from core.vectorstore import edge_requests as edge
from core.vectorstore import qdrant_requests as server
from core.vectorstore.engine import (
    DateRange,
    Flag,
    HasIds,
    HasVector,
    IsEmpty,
    Match,
    Range,
    Where,
)
from core.vectorstore.filters import (
    both,
    in_shard,
    search_filter,
    shard_filter,
    walking,
    with_keys,
)

SINCE = datetime(2024, 1, 5, tzinfo=UTC)


def test_an_empty_search_filter_is_no_filter() -> None:
    assert search_filter(None) is None
    assert search_filter(SearchFilter()) is None


def test_each_condition_of_a_search_filter() -> None:
    f = SearchFilter(
        tags_any=("cat", "dog"),
        tags_all=("beach", "sun"),
        photographer="ann",
        license="cc-by",
        created_from=SINCE,
        exclude_ids=("p1", "p2"),
    )
    assert search_filter(f) == Where(
        must=(
            Match("tags", ("cat", "dog")),
            Match("tags", ("beach",)),
            Match("tags", ("sun",)),
            Match("photographer", ("ann",)),
            Match("license", ("cc-by",)),
            DateRange("created_at", SINCE, None),
        ),
        must_not=(HasIds(frozenset({point_id("p1"), point_id("p2")})),),
    )
    # Only photos to leave out: a filter of must_not alone.
    assert search_filter(SearchFilter(exclude_ids=("p1",))) == Where(
        must_not=(HasIds(frozenset({point_id("p1")})),)
    )


def test_shards_keys_and_a_condition_with_a_filter() -> None:
    assert shard_filter(None) is None
    assert shard_filter("b") == Where((Match(SHARD_FIELD, ("b",)),))
    assert shard_filter("b", unlabelled=True) == Where((IsEmpty(SHARD_FIELD),))
    assert in_shard(None, ["p1"]) == Where(
        (HasIds(frozenset({point_id("p1")})), IsEmpty(SHARD_FIELD))
    )
    assert with_keys(["a/1.jpg", "a/2.jpg"]) == Where((Match(KEY_FIELD, ("a/1.jpg", "a/2.jpg")),))
    group = Match("dup_group", ("g",))
    assert both(group, None) == Where((group,))
    assert both(group, Where((IsEmpty("x"),))) == Where((group, Where((IsEmpty("x"),))))


EVERY_KIND = Where(
    must=(
        Match("tags", ("cat",)),
        Match("tags", ("cat", "dog")),
        DateRange("created_at", SINCE, None),
        Where(must_not=(HasVector("keywords"),)),
    ),
    must_not=(HasIds(frozenset({point_id("p1")})), IsEmpty("shard")),
)


def test_a_server_filter_names_each_condition_as_the_neutral_one_does() -> None:
    assert server.where(EVERY_KIND) == qm.Filter(
        must=[
            qm.FieldCondition(key="tags", match=qm.MatchValue(value="cat")),
            qm.FieldCondition(key="tags", match=qm.MatchAny(any=["cat", "dog"])),
            qm.FieldCondition(key="created_at", range=qm.DatetimeRange(gte=SINCE)),
            qm.Filter(must_not=[qm.HasVectorCondition(has_vector="keywords")]),
        ],
        must_not=[
            qm.HasIdCondition(has_id=[point_id("p1")]),
            qm.IsEmptyCondition(is_empty=qm.PayloadField(key="shard")),
        ],
    )


@pytest.mark.parametrize("where", [EVERY_KIND, Where(must_not=(IsEmpty("x"),))])
def test_an_edge_filter_holds_each_condition(where: Where) -> None:
    # Edge's classes do not compare by value: their repr names every part.
    made = edge.where(where)
    assert isinstance(made, qe.Filter)
    shown = repr(made)
    for part in ("cat", "created_at", "keywords", point_id("p1"), "shard"):
        assert (part in shown) == (where is EVERY_KIND), part


def test_the_visual_and_automatic_tag_conditions_of_a_search_filter() -> None:
    f = SearchFilter(
        auto_tags_all=("beach", "sunset"),
        color="red",
        color_min_share=0.2,
        orientation="portrait",
        min_width=1200,
        min_height=800,
        copy_space=True,
    )
    assert search_filter(f) == Where(
        must=(
            Match("auto_tags", ("beach",)),
            Match("auto_tags", ("sunset",)),
            Range("color_shares.red", gte=0.2),
            Match("orientation", ("portrait",)),
            Range("width", gte=1200),
            Range("height", gte=800),
            Flag("copy_space", True),
        )
    )
    # A colour without a minimum: any share the payload records (1% and up).
    assert search_filter(SearchFilter(color="teal")) == Where(
        (Range("color_shares.teal", gte=0.01),)
    )
    assert search_filter(SearchFilter(copy_space=False)) == Where((Flag("copy_space", False),))


def test_ranges_and_flags_in_each_engines_classes() -> None:
    where = Where((Range("width", gte=1200), Range("color_shares.red", lte=0.5), Flag("b", False)))
    assert server.where(where) == qm.Filter(
        must=[
            qm.FieldCondition(key="width", range=qm.Range(gte=1200)),
            qm.FieldCondition(key="color_shares.red", range=qm.Range(lte=0.5)),
            qm.FieldCondition(key="b", match=qm.MatchValue(value=0)),
        ]
    )
    shown = repr(edge.where(where))
    for part in ("width", "1200", "color_shares.red", "0.5", "RangeFloat", "MatchValue(value=0)"):
        assert part in shown, (part, shown)


ACORN = SearchTuning(hnsw_ef=64, acorn=True)


def test_a_date_window_walks_its_payload_subgraph_without_acorn() -> None:
    window = search_filter(SearchFilter(created_from=SINCE, exclude_ids=("a",)))
    walked = walking(ACORN, window)
    assert walked is not None and not walked.acorn and walked.hnsw_ef == 64
    # Both engines are sent the same: no ACORN.
    assert edge.params(ACORN, window).acorn is None  # type: ignore[union-attr]
    assert server.params(ACORN, window).acorn is None  # type: ignore[union-attr]


def test_a_filter_on_a_field_without_a_subgraph_keeps_acorn() -> None:
    dated_and_tagged = search_filter(SearchFilter(created_from=SINCE, tags_any=("red",)))
    assert walking(ACORN, dated_and_tagged) == ACORN
    nested = Where(must=(Where(must=(Match("license", ("editorial",)),)),))
    assert walking(ACORN, nested) == ACORN
    assert walking(ACORN, Where(must=(HasVector("keywords"),))) == ACORN
    # Nothing to decide: no filter, ids only, ACORN not asked for, no tuning.
    assert walking(ACORN, None) == ACORN
    assert walking(ACORN, search_filter(SearchFilter(exclude_ids=("a",)))) == ACORN
    plain = SearchTuning(hnsw_ef=64)
    assert walking(plain, search_filter(SearchFilter(tags_any=("red",)))) == plain
    assert walking(None, nested) is None
