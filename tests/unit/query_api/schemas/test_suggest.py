"""The suggestions' query: a typed text that is not blank and fits a search box, a limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from query_api.schemas.suggest import MAX_SUGGEST_CHARS, SuggestQuery, SuggestResponse


def test_a_typed_text_and_the_default_limit() -> None:
    query = SuggestQuery(q="red bi")
    assert (query.q, query.limit) == ("red bi", 8)


@pytest.mark.parametrize(
    "given",
    [
        {"q": ""},
        {"q": "   "},
        {"q": "x" * (MAX_SUGGEST_CHARS + 1)},
        {"q": "red\x00"},
        {"q": "red", "limit": 0},
        {"q": "red", "limit": 21},
        {"q": "red", "limit": True},
        {"q": "red", "other": 1},
    ],
)
def test_what_no_search_box_holds_is_refused(given: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SuggestQuery.model_validate(given)


def test_the_answer_names_each_suggestions_source() -> None:
    answer = SuggestResponse.model_validate(
        {"q": "red", "suggestions": [{"text": "red car", "source": "query"}]}
    )
    assert answer.suggestions[0].source == "query"
    with pytest.raises(ValidationError):
        SuggestResponse.model_validate({"q": "r", "suggestions": [{"text": "x", "source": "ad"}]})
