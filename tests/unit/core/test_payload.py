"""A photo's payload as one declared contract: every field the store indexes or reads is a key
PhotoPayload declares, and the core reads a payload an earlier release stored as it did."""

from __future__ import annotations

from core.keywords import WORD_FIELDS, photo_words
from core.payload import PhotoPayload, as_json, payload_of
from core.sources import photo_root
from core.terms import TERMS_FIELD
from core.vectorstore import (
    DATETIME_FIELDS,
    GROUP_FIELD,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    IndexedPoint,
)
from core.vectorstore.base import FLOAT_FIELDS, POINT_FIELDS, indexed_point
from core.vectorstore.boosts import CREATED, DEFAULTS, POPULARITY
from tests.support.payloads import OLDEST, PREVIOUS

DECLARED = set(PhotoPayload.__annotations__)


def test_every_key_is_optional_for_reads_of_some_fields_and_older_points() -> None:
    assert PhotoPayload.__required_keys__ == frozenset()
    assert set(PhotoPayload.__optional_keys__) == DECLARED


def test_every_field_the_store_indexes_or_reads_is_a_declared_key() -> None:
    # A colour's share is indexed by its path in `color_shares` ("color_shares.red").
    indexes = (*KEYWORD_FIELDS, *DATETIME_FIELDS, *INTEGER_FIELDS, *FLOAT_FIELDS)
    indexed = {name.split(".", 1)[0] for name in indexes}
    read = {*POINT_FIELDS, *WORD_FIELDS, TERMS_FIELD, GROUP_FIELD, CREATED, POPULARITY}
    assert indexed | read | set(DEFAULTS) <= DECLARED


def test_the_previous_release_s_payload_holds_only_declared_keys() -> None:
    assert set(PREVIOUS) == DECLARED
    assert set(OLDEST) < DECLARED


def test_an_engine_s_payload_is_typed_without_a_copy_of_its_values() -> None:
    assert payload_of(None) == {}
    typed = payload_of(PREVIOUS)
    assert typed == PREVIOUS and typed is not PREVIOUS
    assert as_json(typed) is typed


def test_the_core_readers_read_an_older_payload_as_before() -> None:
    assert indexed_point(payload_of(PREVIOUS)) == IndexedPoint(
        "harbour.jpg",
        "day1/harbour.jpg",
        "2048-1714545000000000000",
        "0123456789abcdef",
        "day1/",
        "file:///photos/day1/harbour.jpg",
        "5f0c6c1e3f4e4c3a",
    )
    assert indexed_point(payload_of(OLDEST)) == IndexedPoint(
        "mill.jpg", "", "512-1700000000000000000", "", None, "file:///photos/mill.jpg", ""
    )
    assert photo_words(payload_of(PREVIOUS)) == [
        *("harbour", "dawn", "boat", "sea", "ann", "lee", "water", "boat")
    ]
    assert photo_words(payload_of(OLDEST)) == ["old", "mill", "mill"]
    assert photo_root(payload_of(PREVIOUS), None) == "file:///photos"
    assert photo_root(payload_of(OLDEST), "file:///synced") == "file:///synced"
