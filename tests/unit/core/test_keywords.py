"""The words of photos and queries, and their BM25 weights."""

from __future__ import annotations

import pytest

from core.keywords import (
    AUTO_TAG_WEIGHT,
    AVERAGE_WORDS,
    K1,
    B,
    document_vector,
    photo_words,
    query_vector,
    word_id,
    words,
)
from core.payload import PhotoPayload


def weight_of(word: str, payload: PhotoPayload) -> float:
    vector = document_vector(payload)
    return dict(zip(vector.indices, vector.values, strict=True))[word_id(word)]


def test_words_fold_case_and_accents() -> None:
    # "à" is "a" once folded: a stopword.
    assert words("Café CRÈME, brûlée à Zürich") == ["cafe", "creme", "brulee", "zurich"]
    assert words("ÉTÉ") == words("été") == words("ete") == ["ete"]
    assert words("Straße") == ["strasse"]


def test_stopwords_are_left_out() -> None:
    assert words("A dog in the snow, with an owner") == ["dog", "snow", "owner"]
    assert words("The of AND") == []
    assert query_vector("the and of") == query_vector("")
    assert query_vector("").indices == ()


def test_a_photo_s_words_are_its_title_tags_and_photographer() -> None:
    payload: PhotoPayload = {
        "title": "Old Lighthouse",
        "tags": ["coast", "sea fog"],
        "photographer": "Ann Lee",
        "license": "cc-by",
        "extra": {"camera": "leica"},
    }
    assert photo_words(payload) == ["old", "lighthouse", "coast", "sea", "fog", "ann", "lee"]
    assert photo_words({"title": None, "tags": [], "photographer": None}) == []
    assert document_vector({"title": None, "tags": []}).indices == ()


def test_document_weights_are_bm25_term_frequencies() -> None:
    vector = document_vector({"title": "dog cat bird fish"})
    assert list(vector.indices) == sorted(vector.indices)
    norm = K1 * (1 - B + B * 4 / AVERAGE_WORDS)
    assert weight_of("dog", {"title": "dog cat bird fish"}) == pytest.approx((K1 + 1) / (1 + norm))


def test_weights_saturate_as_a_word_repeats() -> None:
    # Four words each time: only how often "dog" occurs changes.
    once = weight_of("dog", {"title": "dog cat bird fish"})
    twice = weight_of("dog", {"title": "dog dog bird fish"})
    four = weight_of("dog", {"title": "dog dog dog dog"})
    assert once < twice < four < K1 + 1
    # Each further occurrence adds less than the one before.
    assert (four - twice) / 2 < twice - once
    # A word in a longer text weighs less (length normalization).
    assert weight_of("dog", {"title": "dog " + "cat " * 20}) < once


def test_a_query_holds_each_distinct_word_once() -> None:
    vector = query_vector("Dog dog DOG on the beach")
    assert vector.indices == tuple(sorted({word_id("dog"), word_id("beach")}))
    assert vector.values == (1.0, 1.0)
    assert query_vector(["dog", "Beach dog"]) == vector


def test_word_ids_are_stable_32_bit_numbers() -> None:
    assert word_id("dog") == word_id("dog") != word_id("cat")
    assert all(0 <= word_id(w) < 2**32 for w in ("dog", "cat", "zurich", "x" * 500))


def test_automatic_tags_weigh_less_than_the_words_a_person_typed() -> None:
    # Two typed words each: the same length, so the same BM25 norm.
    typed: PhotoPayload = {"title": "harbour", "tags": ["boat"]}
    guessed: PhotoPayload = {
        "title": "harbour",
        "tags": ["quay"],
        "auto_tags": ["boat", "sea water"],
    }
    assert weight_of("boat", guessed) == pytest.approx(AUTO_TAG_WEIGHT * weight_of("boat", typed))
    assert 0 < AUTO_TAG_WEIGHT < 1
    # Tagged by both: the person's word, once; the automatic words leave the length alone.
    both: PhotoPayload = {"title": "harbour", "tags": ["boat"], "auto_tags": ["boat"]}
    assert weight_of("boat", both) == pytest.approx(weight_of("boat", typed))
    assert weight_of("harbour", guessed) == weight_of("harbour", {"title": "harbour quay"})
    assert weight_of("water", guessed) == weight_of("sea", guessed) > 0


def test_a_photo_s_words_include_its_automatic_tags_for_the_not_filter() -> None:
    payload: PhotoPayload = {
        "title": "Harbour",
        "tags": ["boat"],
        "auto_tags": ["sea water", "boat"],
    }
    assert photo_words(payload) == ["harbour", "boat", "sea", "water", "boat"]
    assert photo_words(payload, ("title",)) == ["harbour"]
    assert document_vector({"auto_tags": ["dog"]}).indices == (word_id("dog"),)
