"""What the API accepts and answers: search parameters, filters, results, errors, admin jobs."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from core.vectorstore import SearchFilter

MAX_QUERY_CHARS = 500
MAX_LIMIT = 100
MAX_OFFSET = 10_000
MAX_TAGS = 20
MAX_EXCLUDED = 100


def _refuse_surrogates(text: str) -> None:
    # JSON's "\ud800" escape decodes to a lone surrogate, which pydantic lets through in the
    # items of a list[str] (a constrained str refuses it); the vector store cannot encode it
    # as UTF-8 and would fail the search with a TypeError.
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a tag holds a lone surrogate (\\ud800-\\udfff), not a character")


class Filters(BaseModel):
    """Metadata filters; every given condition must hold."""

    model_config = ConfigDict(extra="forbid")

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

    @field_validator("tags_any", "tags_all")
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
        )


class Page(Filters):
    """How many results, from where, and the filters."""

    limit: int = Field(20, ge=1, le=MAX_LIMIT, description="Results per page.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Results to skip (pagination).")

    @field_validator("limit", "offset", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        # JSON's true is not 1 (pydantic's lax mode would take it); a query string is text.
        if isinstance(value, bool):
            raise ValueError("a number is needed, not true or false")
        return value


class TextSearch(Page):
    """A text query with its page and filters (GET query string or POST JSON body)."""

    q: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, description="What the photo shows, in words."
    )

    @field_validator("q")
    @classmethod
    def _not_blank(cls, q: str) -> str:
        if not q.strip():
            raise ValueError("the query is blank")
        # Category Cc: C0, DEL and C1 (U+0080..U+009F); tabs and newlines are only spaces.
        if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in q):
            raise ValueError("the query holds control characters")
        return q


class PhotoMetadata(BaseModel):
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    photographer: str | None = None
    license: str | None = None
    created_at: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Photo(BaseModel):
    """A stored photo: its identity, metadata and where the page gets its pixels."""

    id: str
    metadata: PhotoMetadata
    model_version: int | None = None
    indexed_at: str | None = None
    image_url: str
    thumbnail_url: str


class Result(Photo):
    score: float = Field(description="Cosine similarity to the query, -1..1.")


class SearchResponse(BaseModel):
    results: list[Result]
    model_version: int = Field(description="The model version that embedded the query.")
    collection: str = Field(description="The collection searched (built with model_version).")
    cached: bool | None = Field(
        None,
        description="Callers with the admin scope: the query embedding came from the cache. "
        "Null for every other caller (it would tell whether someone searched the phrase).",
    )
    limit: int
    offset: int
    next_offset: int | None = Field(description="Offset of the next page; null on the last.")
    took_ms: float


class ErrorResponse(BaseModel):
    """Every 4xx and 5xx answer."""

    error: str = Field(description="A stable code: invalid_request, unauthorized, ...")
    message: str = Field(description="What was wrong, for a person.")
    details: list[dict[str, Any]] | None = Field(
        None, description="422: the first few validation errors (loc, msg, type)."
    )
    more_errors: int | None = Field(None, description="422: how many errors were left out.")


class SourceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str | None = Field(
        None, max_length=2000, description="file:///dir or s3://bucket/prefix; default: the last."
    )
    # Strict: 0.0 or "yes" for a flag that deletes photos is a mistake to refuse, not to guess.
    force: StrictBool = Field(
        False,
        description="Go on even past PHOTOSEARCH_INDEXER__MAX_DELETE_SHARE: a sync that would "
        "delete more than that share of the live index, or a reindex whose switch would drop "
        "it, is refused otherwise (the job says so).",
    )


class SyncRequest(SourceRequest):
    kind: Literal["sync", "increment"] = Field(
        "sync",
        description="sync: list the whole source; increment: what the change feed reported.",
    )


class ReindexRequest(SourceRequest):
    model_version: int = Field(ge=1, description="The exported model version to rebuild with.")


class JobAccepted(BaseModel):
    job_id: str
    kind: str
    status_url: str
    joined: bool = Field(
        False, description="True: the same job was running already; this is that job."
    )


class RollbackResponse(BaseModel):
    job_id: str
    state: Literal["done", "failed", "queued", "running"]
    message: str


class Job(BaseModel):
    id: str
    kind: str
    state: str
    source: str
    collection: str
    model_version: int
    phase: str = Field(description="A reindex: load, indexing or catch-up.")
    round: int = Field(description="A reindex: 0 the load, then each catch-up pass.")
    listed: int = Field(description="Photos listed so far.")
    shards_total: int = Field(description="Shards of the round (more as big ones are split).")
    shards_planned: int
    estimated_total: int = Field(description="total, extrapolated while shards are planned.")
    total: int
    done: int
    failed: int
    skipped: int
    deleted: int
    updated: int
    unchanged: int
    images_per_s: float
    eta_s: float | None
    created_at: float
    started_at: float
    finished_at: float
    message: str
    force: bool = Field(False, description="Asked with force: no delete guard.")
    refused: bool = Field(
        False,
        description="Refused by the delete guard (failed): the message gives the counts, the "
        "share and how to force it.",
    )
    live_count: int = Field(0, description="Photos of the live index when the guard counted.")
    delete_budget: int = Field(0, description="Deletions the job may make without force.")
    held: int = Field(
        0, description="Deletions held back until the whole listing was seen within the budget."
    )
    problems: list[str] = Field(default_factory=list)


class ModelResponse(BaseModel):
    """The model behind the live collection: what queries are embedded with now."""

    model_version: int
    collection: str
    arch: str
    weights: str = Field(description="The pretrained tag, a checkpoint's file name, or 'random'.")
    random_weights: bool = Field(
        description="Random weights: text search is meaningless; image similarity still works."
    )
    embedding_dim: int
