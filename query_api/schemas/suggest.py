"""The suggestions' query and answer (GET /v1/suggest): completions of what a searcher typed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from query_api.schemas.search import _not_a_boolean, _query_text
from query_api.suggest.index import MAX_LIMIT

# What a search box holds while a person types; a longer text is not completed.
MAX_SUGGEST_CHARS = 100


class SuggestQuery(BaseModel):
    """What the search box holds, and how many completions to offer."""

    model_config = ConfigDict(extra="forbid")

    q: str = Field(
        min_length=1,
        max_length=MAX_SUGGEST_CHARS,
        description="What the searcher typed so far (not blank); compared as a search's query "
        "is (case, spaces) and with accents ignored: its whole text starts popular queries and "
        "tags, its last word starts words of titles and tags.",
    )
    limit: int = Field(
        8, ge=1, le=MAX_LIMIT, description="Suggestions at most, best first (1 to 20)."
    )

    @field_validator("q")
    @classmethod
    def _not_blank(cls, q: str) -> str:
        return _query_text(q)

    _limit = field_validator("limit", mode="before")(_not_a_boolean)


class SuggestionItem(BaseModel):
    """One completion."""

    text: str = Field(description="The whole query to search, the typed text completed.")
    source: Literal["query", "tag", "title"] = Field(
        description="query: searched by several visitors' sessions "
        "(PHOTOSEARCH_API__SUGGEST_MIN_SESSIONS); tag: a photographer's tag (or the typed "
        "words and a tag); title: the typed words and a word of titles and tags."
    )


class SuggestResponse(BaseModel):
    """Completions of `q`: popular queries first (most sessions), then the collection's tags
    and words (most photos); empty when nothing matches."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "q": "red bi",
                    "suggestions": [
                        {"text": "red bicycle", "source": "query"},
                        {"text": "red bike", "source": "tag"},
                        {"text": "red bird", "source": "title"},
                    ],
                }
            ]
        }
    )

    q: str = Field(description="The typed text, as it was sent.")
    suggestions: list[SuggestionItem]
