"""What the API answers, as typed models: search pages, photos, the model, readiness."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A field the API adds later is ignored, so an application keeps working across releases.
_ANSWER = ConfigDict(extra="ignore", frozen=True)


class PhotoMetadata(BaseModel):
    model_config = _ANSWER

    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    photographer: str | None = None
    license: str | None = None
    created_at: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ColorShare(BaseModel):
    model_config = _ANSWER

    name: str  # a palette colour: red, orange, ..., black, grey, white
    share: float  # of the photo's pixels, 0 to 1


class PhotoAttributes(BaseModel):
    """What the indexer saw in a photo's pixels: its original size (upright), orientation,
    the colours covering 5% of it or more (largest first), and whether it is mostly one
    plain colour (copy space)."""

    model_config = _ANSWER

    width: int
    height: int
    aspect_ratio: float
    orientation: Literal["landscape", "portrait", "square"]
    colors: list[ColorShare]
    copy_space: bool


class Photo(BaseModel):
    """A stored photo: its id, metadata, and the API paths of its original and thumbnail."""

    model_config = _ANSWER

    id: str
    metadata: PhotoMetadata
    model_version: int | None = None
    indexed_at: str | None = None
    auto_tags: list[str] = Field(default_factory=list)  # the model's, apart from metadata.tags
    attributes: PhotoAttributes | None = None  # None: indexed before they were computed
    image_url: str
    thumbnail_url: str


class Duplicates(BaseModel):
    """The near-duplicates a result stands for (with collapse): how many, the first ids."""

    model_config = _ANSWER

    group: str
    count: int
    ids: list[str]


class Result(Photo):
    score: float
    duplicates: Duplicates | None = None


class FacetValue(BaseModel):
    """One value of a field and how many of the photos counted hold it."""

    model_config = _ANSWER

    value: str
    count: int


class FacetCounts(BaseModel):
    """The values of each asked field among the photos that match a search, most held first:
    over "score_threshold" (every photo above it) or "pool" (the ranking's first candidates);
    `capped`: more photos match than were counted."""

    model_config = _ANSWER

    over: Literal["score_threshold", "pool"]
    photos: int
    capped: bool
    fields: dict[str, list[FacetValue]]


class SearchPage(BaseModel):
    """One page of a search's results, and where the next page starts."""

    model_config = _ANSWER

    results: list[Result]
    mode: Literal["hybrid", "vector", "keyword"] | None = None
    model_version: int
    collection: str
    cached: bool | None = None
    limit: int
    offset: int
    next_offset: int | None
    took_ms: float
    # What to name in events on these results (Client.events); absent from an older API.
    search_id: str | None = None
    # The counts `facets` asked for, on a first page; None otherwise.
    facets: FacetCounts | None = None


class Suggestion(BaseModel):
    """One completion of the typed text: the whole query to search, and where it comes from
    ("query": searched by several visitors; "tag"; "title": a word of titles and tags)."""

    model_config = _ANSWER

    text: str
    source: Literal["query", "tag", "title"]


class SuggestPage(BaseModel):
    """Completions of `q`, best first."""

    model_config = _ANSWER

    q: str
    suggestions: list[Suggestion]


class Event(BaseModel):
    """What a searcher did with one result of a search: the search's `search_id`, the photo,
    its rank (1: the first result) and the action."""

    search_id: str
    photo_id: str
    rank: int
    action: Literal["opened", "downloaded", "skipped"]


class EventsAccepted(BaseModel):
    """The events kept, and how many searches they were about."""

    model_config = _ANSWER

    accepted: int
    searches: int


class DuplicatesPage(BaseModel):
    """A page of a photo's near-duplicate group: the other photos in it."""

    model_config = _ANSWER

    photo_id: str
    group: str
    photos: list[Photo]  # a page of them, in id order
    count: int = 0  # the other photos of the group (the first 1,000)
    limit: int = 20
    offset: int = 0
    next_offset: int | None = None


class ModelInfo(BaseModel):
    """The model behind the live collection."""

    model_config = _ANSWER

    model_version: int
    collection: str
    arch: str
    weights: str
    random_weights: bool
    embedding_dim: int


class Health(BaseModel):
    """Readiness: `ready` unless the vector store or the model does not answer; `status` is
    "degraded" when only the query cache is down."""

    model_config = _ANSWER

    status: Literal["ready", "degraded", "not ready"]
    checks: dict[str, dict[str, Any]]

    @property
    def ready(self) -> bool:
        return self.status != "not ready"


class Image(BaseModel):
    """A photo's bytes: its original file or its thumbnail."""

    model_config = _ANSWER

    data: bytes
    media_type: str
    etag: str | None = None
