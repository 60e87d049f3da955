"""What the API accepts: search parameters, filters, pages (its answers: answers.py)."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from core.vectorstore import SearchFilter
from query_api.schemas.attributes import (
    PALETTE_TEXT,
    Orientation,
    palette_color,
    query_flag,
)
from query_api.schemas.facets import (
    FACET_NAMES,
    MAX_FACET_LIMIT,
    FacetName,
    facet_names,
)

MAX_QUERY_CHARS = 500
MAX_LIMIT = 100
MAX_OFFSET = 10_000
MAX_TAGS = 20
MAX_EXCLUDED = 100
MAX_NOT = 5
MAX_EXAMPLES = 20
# How many of a group's other photos a result lists (its count says how many there are).
MAX_DUPLICATE_IDS = 20
# The most a boost's weight may be: ten times the largest cosine similarity.
MAX_BOOST = 10.0


def _refuse_surrogates(text: str) -> None:
    # JSON's "\ud800" escape decodes to a lone surrogate, which pydantic lets through in the
    # items of a list[str] (a constrained str refuses it); the vector store cannot encode it
    # as UTF-8 and would fail the search with a TypeError.
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a tag holds a lone surrogate (\\ud800-\\udfff), not a character")


class Filters(BaseModel):
    """Metadata filters; every given condition must hold."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"tags_any": ["street"], "license": "royalty-free"}]},
    )

    tags_any: list[str] = Field(
        default_factory=list, max_length=MAX_TAGS, description="At least one of these tags."
    )
    tags_all: list[str] = Field(
        default_factory=list, max_length=MAX_TAGS, description="Every one of these tags."
    )
    photographer: str | None = Field(None, max_length=200)
    license: str | None = Field(None, max_length=200)
    created_from: datetime | None = Field(None, description="created_at >= this (ISO 8601).")
    created_to: datetime | None = Field(None, description="created_at <= this (ISO 8601).")
    score_threshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="Leave out results with a lower cosine score."
    )
    # What the indexer saw in the pixels, and the model's tags (docs/searching/filters.md).
    auto_tags_all: list[str] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="Every one of these automatic tags (the model's, a result's `auto_tags`).",
    )
    color: str | None = Field(
        None,
        max_length=40,
        description=f"Photos showing this colour: a palette name ({PALETTE_TEXT}) or a hex "
        "colour (#1e90ff or 1e90ff), which means its nearest palette colour.",
    )
    color_min_share: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="With color: the least share of the photo's pixels it must cover "
        "(0: any share the index records, 1% and up). The default, 5%, is the share a "
        "photo's `colors` list (and so the color facet's count) starts at.",
    )
    orientation: Orientation | None = Field(
        None, description="landscape, portrait, or square (width / height within 5% of 1)."
    )
    min_width: int | None = Field(
        None, ge=1, le=1_000_000, description="The original is at least this wide (pixels)."
    )
    min_height: int | None = Field(
        None, ge=1, le=1_000_000, description="The original is at least this tall (pixels)."
    )
    copy_space: StrictBool | None = Field(
        None,
        description="true: photos mostly of one plain colour (room for a caption); false: "
        "the others.",
    )

    _color = field_validator("color", mode="before")(palette_color)
    _copy_space = field_validator("copy_space", mode="before")(query_flag)

    @field_validator("tags_any", "tags_all", "auto_tags_all")
    @classmethod
    def _tags_not_blank(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not tag.strip() or len(tag) > 100:
                raise ValueError("a tag must be 1 to 100 characters, not blank")
            _refuse_surrogates(tag)
        return tags

    @field_validator("created_from", "created_to", mode="before")
    @classmethod
    def _iso_8601(cls, value: object) -> object:
        # pydantic alone also reads a number as Unix time ("-4e-178" was 1970-01-01): the
        # schema says ISO 8601, so a caller who sent something else hears so.
        if isinstance(value, datetime) or value is None:
            return value
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError(f"{repr(value)[:60]} is not an ISO 8601 date or time, e.g. 2024-01-31")

    @model_validator(mode="after")
    def _range_in_order(self) -> Filters:
        if self.created_from and self.created_to:
            a, b = self.created_from, self.created_to
            if (a.tzinfo is None) != (b.tzinfo is None):
                raise ValueError("created_from and created_to: give both with a time zone or none")
            if a > b:
                raise ValueError("created_from is after created_to")
        return self

    def to_store(self, exclude_ids: tuple[str, ...] = ()) -> SearchFilter:
        return SearchFilter(
            tags_any=tuple(self.tags_any),
            tags_all=tuple(self.tags_all),
            photographer=self.photographer,
            license=self.license,
            created_from=self.created_from,
            created_to=self.created_to,
            exclude_ids=exclude_ids,
            auto_tags_all=tuple(self.auto_tags_all),
            color=self.color,
            color_min_share=self.color_min_share,
            orientation=self.orientation,
            min_width=self.min_width,
            min_height=self.min_height,
            copy_space=self.copy_space,
        )


def _not_a_boolean(value: object) -> object:
    """A page's limit and offset: JSON's true is not 1 (pydantic's lax mode would take it);
    a query string is text."""
    if isinstance(value, bool):
        raise ValueError("a number is needed, not true or false")
    return value


class Page(Filters):
    """How many results, from where, the filters, and how the results are arranged."""

    limit: int = Field(20, ge=1, le=MAX_LIMIT, description="Results per page.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Results to skip (pagination).")
    collapse: StrictBool = Field(
        True,
        description="One photo per near-duplicate group (crops, re-encodings, bursts of one "
        "scene): the best of the group stands for the rest, listed in its `duplicates`. "
        "false: every photo.",
    )
    diversity: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="0: by relevance alone. Up to 1: re-rank the most relevant candidates by "
        "maximal marginal relevance, trading relevance for results that look unlike each other.",
    )
    boost_recency: float | None = Field(
        None,
        ge=0.0,
        le=MAX_BOOST,
        description="Weight of recency added to each candidate's score: weight x "
        "0.5^(age / PHOTOSEARCH_API__RECENCY_HALF_LIFE_DAYS), age from created_at (none "
        "for a photo without it). In the score's units: a cosine is up to 1, a fused "
        "(hybrid) score about 0.03. null: the replica's PHOTOSEARCH_API__BOOST_RECENCY; 0: off.",
    )
    boost_popularity: float | None = Field(
        None,
        ge=0.0,
        le=MAX_BOOST,
        description="Weight of popularity added to each candidate's score: weight x "
        "p / (p + PHOTOSEARCH_API__POPULARITY_HALF), p its opens + 5 x downloads over the "
        "feedback retention (docs/searching/boosts.md). null: the replica's "
        "PHOTOSEARCH_API__BOOST_POPULARITY; 0: off.",
    )
    sort: Literal["relevance", "newest"] = Field(
        "relevance",
        description="newest: the most relevant candidates (PHOTOSEARCH_API__RERANK_POOL, and "
        "above score_threshold), newest created_at first.",
    )

    facets: list[FacetName] = Field(
        default_factory=list,
        description="Count the values of these fields among the photos that match, beside "
        "the results (comma-separated or repeated: facets=tags,color): "
        f"{', '.join(FACET_NAMES)}. Counted on the first page (offset 0) only: `facets` "
        "in the answer. With a score_threshold, over every photo that passes it; without, "
        "over the search's first PHOTOSEARCH_API__FACET_POOL candidates.",
    )
    facet_limit: int = Field(
        10, ge=1, le=MAX_FACET_LIMIT, description="Values per facet, the most held first."
    )

    _facet_names = field_validator("facets", mode="before")(facet_names)
    _facet_limit = field_validator("facet_limit", mode="before")(_not_a_boolean)

    @field_validator("collapse", mode="before")
    @classmethod
    def _flag(cls, value: object) -> object:
        # A query string is text: "true"/"false" (and 1/0) are its booleans; JSON's are strict.
        if isinstance(value, str) and value.lower() in {"true", "false", "1", "0"}:
            return value.lower() in {"true", "1"}
        return value

    def rearranged(self) -> bool:
        """Whether the results are more than the store's own ranking, paged."""
        return self.collapse or self.diversity > 0 or self.sort != "relevance"

    _limit_and_offset = field_validator("limit", "offset", mode="before")(_not_a_boolean)


def _query_text(q: str) -> str:
    if not q.strip():
        raise ValueError("the query is blank")
    # Category Cc: C0, DEL and C1 (U+0080..U+009F); tabs and newlines are only spaces.
    if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in q):
        raise ValueError("the query holds control characters")
    # A lone surrogate (JSON's "\ud800") is no character: it cannot even be encoded as UTF-8.
    if any(unicodedata.category(c) == "Cs" for c in q):
        raise ValueError("the query holds a lone surrogate (\\ud800-\\udfff), not text")
    return q


class TextSearch(Page):
    """A text query with its page and filters (GET query string or POST JSON body)."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "q": "a red bicycle against a brick wall",
                    "mode": "hybrid",
                    "not": ["cars"],
                    "tags_any": ["street", "city"],
                    "created_from": "2024-01-01",
                    "limit": 20,
                }
            ]
        },
    )

    q: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, description="What the photo shows, in words."
    )
    mode: Literal["hybrid", "vector", "keyword"] = Field(
        "hybrid",
        description="hybrid: the photos' embeddings and the words of their title, tags and "
        "photographer, the two rankings fused (reciprocal rank fusion); vector: embeddings "
        "only; keyword: words only (BM25; case and accents ignored).",
    )
    not_: list[str] = Field(
        default_factory=list,
        alias="not",
        max_length=MAX_NOT,
        description="Descriptions to move away from (repeat `not` in a query string): the "
        "query's embedding less not_weight times theirs; photos holding all the words of one "
        "of them leave the keyword ranking.",
    )
    not_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="How far `not` moves the query away (0: not at all)."
    )

    @field_validator("q")
    @classmethod
    def _not_blank(cls, q: str) -> str:
        return _query_text(q)

    @field_validator("not_")
    @classmethod
    def _nots(cls, nots: list[str]) -> list[str]:
        for text in nots:
            if len(text) > MAX_QUERY_CHARS:
                raise ValueError(f"a `not` description is longer than {MAX_QUERY_CHARS} characters")
            _query_text(text)
        return nots

    @model_validator(mode="after")
    def _threshold_needs_a_vector(self) -> TextSearch:
        if self.mode == "keyword" and self.score_threshold is not None:
            raise ValueError(
                "score_threshold is a cosine similarity to the query's embedding: "
                "give it with mode=hybrid or mode=vector, not mode=keyword"
            )
        return self


class RecommendSearch(Page):
    """More like these photos and not like those (GET query string or POST JSON body)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "positive": ["2024/06/red-bicycle.jpg", "2023/09/canal-bikes.jpg"],
                    "negative": ["2024/02/bike-shop-interior.jpg"],
                    "limit": 10,
                }
            ]
        }
    )

    positive: list[str] = Field(
        min_length=1,
        max_length=MAX_EXAMPLES,
        description="Photo ids to find more like (repeat `positive` in a query string).",
    )
    negative: list[str] = Field(
        default_factory=list,
        max_length=MAX_EXAMPLES,
        description="Photo ids whose like to keep away (repeat `negative`).",
    )

    @field_validator("positive", "negative")
    @classmethod
    def _ids(cls, ids: list[str]) -> list[str]:
        for photo_id in ids:
            if not photo_id or len(photo_id) > 1024:
                raise ValueError("a photo id must be 1 to 1024 characters")
            _refuse_surrogates(photo_id)
        return ids


class DuplicatesPage(BaseModel):
    """A page of a photo's near-duplicates."""

    limit: int = Field(20, ge=1, le=MAX_LIMIT, description="Photos per page.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Photos to skip (pagination).")

    _limit_and_offset = field_validator("limit", "offset", mode="before")(_not_a_boolean)
