"""What the API answers: photos, results, pages of results, near-duplicates, errors, the model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from query_api.schemas.attributes import ATTRIBUTES_EXAMPLE, PhotoAttributes
from query_api.schemas.facets import FacetCounts
from query_api.schemas.search import MAX_DUPLICATE_IDS

# The examples of the OpenAPI schema (the documentation's API reference shows them).
_METADATA_EXAMPLE: dict[str, Any] = {
    "title": "Red bicycle against a brick wall",
    "tags": ["bicycle", "street", "red"],
    "photographer": "ana",
    "license": "royalty-free",
    "created_at": "2024-06-01T09:30:00+00:00",
    "extra": {},
}
_PHOTO_EXAMPLE: dict[str, Any] = {
    "id": "2024/06/red-bicycle.jpg",
    "metadata": _METADATA_EXAMPLE,
    "model_version": 2,
    "indexed_at": "2024-06-02T02:04:11+00:00",
    "attributes": ATTRIBUTES_EXAMPLE,
    "image_url": "/v1/photos/2024/06/red-bicycle.jpg/image",
    "thumbnail_url": "/v1/photos/2024/06/red-bicycle.jpg/thumbnail",
}
_DUPLICATES_EXAMPLE: dict[str, Any] = {
    "group": "2024/06/red-bicycle.jpg",
    "count": 2,
    "ids": ["2024/06/red-bicycle-crop.jpg", "2024/06/red-bicycle-small.jpg"],
}


class PhotoMetadata(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_METADATA_EXAMPLE]})

    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    photographer: str | None = None
    license: str | None = None
    created_at: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Photo(BaseModel):
    """A stored photo: its identity, metadata and where the page gets its pixels."""

    model_config = ConfigDict(json_schema_extra={"examples": [_PHOTO_EXAMPLE]})

    id: str
    metadata: PhotoMetadata
    model_version: int | None = None
    indexed_at: str | None = None
    auto_tags: list[str] = Field(
        default_factory=list,
        description="Tags the model gave the photo from its image embedding, best first, "
        "apart from the photographer's tags; empty where its model version stores none.",
    )
    attributes: PhotoAttributes | None = Field(
        None,
        description="Size, orientation and colours, seen in the pixels when the photo was "
        "embedded; null for a photo indexed before (a reindex computes them).",
    )
    image_url: str
    thumbnail_url: str


class Duplicates(BaseModel):
    """The other photos of a result's near-duplicate group that match the search's filters."""

    model_config = ConfigDict(json_schema_extra={"examples": [_DUPLICATES_EXAMPLE]})

    group: str = Field(description="The group's id (GET /v1/photos/{id}/duplicates lists it).")
    count: int = Field(description="How many other photos the result stands for.")
    ids: list[str] = Field(description=f"The first {MAX_DUPLICATE_IDS} of their ids.")


class Result(Photo):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{**_PHOTO_EXAMPLE, "score": 0.3127, "duplicates": _DUPLICATES_EXAMPLE}]
        }
    )

    score: float = Field(
        description="The ranking score: cosine similarity to the query (-1..1) for vector, "
        "image, more-like-this and recommend searches; the reciprocal rank fusion score "
        "for mode=hybrid; BM25 for mode=keyword. With a boost (boost_recency, "
        "boost_popularity), that score plus the boosts: the formula of "
        "docs/searching/boosts.md, evaluated by the store."
    )
    duplicates: Duplicates | None = Field(
        None,
        description="With collapse (the default): the near-duplicates this result stands "
        "for; null when it stands for none, or without collapse.",
    )


class SearchResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [
                        {**_PHOTO_EXAMPLE, "score": 0.3127, "duplicates": _DUPLICATES_EXAMPLE}
                    ],
                    "mode": "hybrid",
                    "model_version": 2,
                    "collection": "photos-m2-3f9c2a1b7d4e",
                    "cached": None,
                    "limit": 20,
                    "offset": 0,
                    "next_offset": 20,
                    "took_ms": 18.4,
                    "search_id": "Jq3vX0b2kS9yQm1Zt8wR4A",
                }
            ]
        }
    )

    results: list[Result]
    mode: Literal["hybrid", "vector", "keyword"] | None = Field(
        None,
        description="A text search: the mode that ran (hybrid runs as vector on a collection "
        "built before keyword search, until a reindex). Null for the other searches.",
    )
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
    search_id: str = Field(
        description="This answer's random id: events on its results name it (POST /v1/events)."
    )
    facets: FacetCounts | None = Field(
        None,
        description="The counts the search's `facets` asked for (first page only); null when "
        "none were asked, or on a later page.",
    )


class DuplicatesResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "photo_id": "2024/06/red-bicycle.jpg",
                    "group": "2024/06/red-bicycle.jpg",
                    "photos": [
                        {
                            **_PHOTO_EXAMPLE,
                            "id": "2024/06/red-bicycle-crop.jpg",
                            "image_url": "/v1/photos/2024/06/red-bicycle-crop.jpg/image",
                            "thumbnail_url": "/v1/photos/2024/06/red-bicycle-crop.jpg/thumbnail",
                        }
                    ],
                    "count": 1,
                    "limit": 20,
                    "offset": 0,
                    "next_offset": None,
                }
            ]
        }
    )

    photo_id: str
    group: str
    photos: list[Photo] = Field(
        description="A page of the other photos of its near-duplicate group, in id order."
    )
    count: int = Field(
        0, description="How many other photos the group holds (the first 1,000 are listed)."
    )
    limit: int = 20
    offset: int = 0
    next_offset: int | None = Field(None, description="Offset of the next page; null on the last.")


class ErrorResponse(BaseModel):
    """Every 4xx and 5xx answer."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": "invalid_request",
                    "message": "limit: Input should be less than or equal to 100",
                    "details": [
                        {
                            "loc": ["query", "limit"],
                            "msg": "Input should be less than or equal to 100",
                            "type": "less_than_equal",
                        }
                    ],
                    "more_errors": 0,
                },
                {"error": "unauthorized", "message": "unknown API key"},
            ]
        }
    )

    error: str = Field(description="A stable code: invalid_request, unauthorized, ...")
    message: str = Field(description="What was wrong, for a person.")
    details: list[dict[str, Any]] | None = Field(
        None, description="422: the first few validation errors (loc, msg, type)."
    )
    more_errors: int | None = Field(None, description="422: how many errors were left out.")


class ModelResponse(BaseModel):
    """The model behind the live collection: what queries are embedded with now."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model_version": 2,
                    "collection": "photos-m2-3f9c2a1b7d4e",
                    "arch": "ViT-B-32",
                    "weights": "laion2b_s34b_b79k",
                    "random_weights": False,
                    "embedding_dim": 512,
                }
            ]
        }
    )

    model_version: int
    collection: str
    arch: str
    weights: str = Field(description="The pretrained tag, a checkpoint's file name, or 'random'.")
    random_weights: bool = Field(
        description="Random weights: text search is meaningless; image similarity still works."
    )
    embedding_dim: int
