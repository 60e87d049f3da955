"""A photo's terms: the distinct words of its title and tags as the keyword side reads them,
and the folded form suggestions compare prefixes in."""

from __future__ import annotations

from core.terms import MAX_TERMS, fold, photo_terms


def test_terms_are_the_distinct_folded_words_of_title_and_tags_in_order() -> None:
    metadata = {
        "title": "The Café at Night, café again",
        "tags": ["Night", "street food"],
        "photographer": "Ana",
    }
    # Stopwords ("the", "at") and the photographer's name are no completion of a subject.
    assert photo_terms(metadata) == ["cafe", "night", "again", "street", "food"]


def test_terms_leave_out_single_letters_and_overlong_words_and_are_bounded() -> None:
    assert photo_terms({"title": "x " + "y" * 41 + " ok"}) == ["ok"]
    many = " ".join(f"word{i}" for i in range(200))
    assert len(photo_terms({"title": many})) == MAX_TERMS


def test_a_photo_without_a_title_or_tags_has_no_terms() -> None:
    assert photo_terms({}) == []
    assert photo_terms({"title": None, "tags": [None, 3]}) == []


def test_fold_drops_accents_and_case_and_collapses_spaces() -> None:
    assert fold("  Crème   BRÛLÉE ") == "creme brulee"
    assert fold("Straße") == "strasse"
