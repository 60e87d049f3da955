"""The in-memory suggestion index: prefixes found by bisection (the best of long ranges kept
when built), popular queries ranked before the vocabulary, each text once."""

from __future__ import annotations

import random

import pytest

from core.feedback.suggestlog import PopularQuery
from query_api.suggest.index import PrefixIndex, SuggestIndex, Suggestion, Vocabulary

VOCABULARY = Vocabulary(
    tags=[("street", 10), ("Red Bike", 4), ("red bike", 1), ("bicycle", 3)],
    terms=[("street", 10), ("red", 9), ("bicycle", 7), ("bike", 5), ("bird", 2), ("cafe", 1)],
)
QUERIES = [
    PopularQuery("red bicycle", 5, 9),
    PopularQuery("red bird", 3, 30),
    PopularQuery("street food", 4, 4),
]


@pytest.fixture(scope="module")
def index() -> SuggestIndex:
    return SuggestIndex(QUERIES, VOCABULARY)


def texts(found: list[Suggestion]) -> list[str]:
    return [s.text for s in found]


def test_a_prefix_finds_the_best_ranked_keys_that_start_with_it() -> None:
    keys = ["bird", "bicycle", "apple", "bike", "bi", "car"]  # best first
    prefixes = PrefixIndex(keys)
    assert [keys[r] for r in prefixes.best("bi", 10)] == ["bird", "bicycle", "bike", "bi"]
    assert [keys[r] for r in prefixes.best("bi", 2)] == ["bird", "bicycle"]
    assert prefixes.best("bix", 10) == [] and prefixes.best("zz", 10) == []


def test_long_ranges_answer_from_their_best_kept_when_built_as_a_scan_would() -> None:
    rng = random.Random(7)
    letters = "abc"
    keys = list(
        dict.fromkeys("".join(rng.choices(letters, k=rng.randint(1, 8))) for _ in range(5000))
    )
    prefixes = PrefixIndex(keys, best=10)
    assert prefixes.best_of  # ranges longer than SCAN were kept
    for prefix in ["a", "b", "ab", "abc", "cab", "ccc", "abca", "c" * 8]:
        expected = [r for r, key in enumerate(keys) if key.startswith(prefix)][:10]
        assert prefixes.best(prefix, 10) == expected, prefix


def test_popular_queries_come_first_by_sessions_then_the_vocabulary_by_photos(
    index: SuggestIndex,
) -> None:
    found = index.complete("red b", 8)
    assert found[:2] == [Suggestion("red bicycle", "query"), Suggestion("red bird", "query")]
    # Then "red bike": a tag of 5 photos ("Red Bike" and "red bike" are one tag), above the
    # typed words and a word of fewer photos; "red bicycle" and "red bird" only once.
    assert found[2:] == [Suggestion("red bike", "tag")]


def test_the_last_word_completes_with_words_of_titles_and_tags(index: SuggestIndex) -> None:
    assert index.complete("a fast bi", 8) == [
        Suggestion("a fast bicycle", "tag"),  # a word that is a tag too
        Suggestion("a fast bike", "title"),
        Suggestion("a fast bird", "title"),
    ]


def test_case_spaces_and_accents_are_compared_as_a_search_does(index: SuggestIndex) -> None:
    assert index.complete("  RED   Bi", 8) == index.complete("red bi", 8)
    assert texts(index.complete("Caf", 8)) == ["cafe"]
    assert texts(index.complete("STRÉ", 8)) == ["street food", "street"]


def test_the_typed_text_itself_is_never_suggested_and_limit_cuts(index: SuggestIndex) -> None:
    assert "street" not in texts(index.complete("street", 8))
    assert texts(index.complete("street", 8)) == ["street food"]
    assert texts(index.complete("r", 1)) == ["red bicycle"]


def test_nothing_matches_an_unknown_prefix_and_an_empty_index_answers_nothing(
    index: SuggestIndex,
) -> None:
    assert index.complete("zebra", 8) == []
    assert index.complete("!!", 8) == []
    assert SuggestIndex().complete("red", 8) == []
    assert len(index) == len(index.whole) + len(index.words)
