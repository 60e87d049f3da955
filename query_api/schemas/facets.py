"""Facet counts: the fields a search may count the values of, and the counts it answers."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

FacetName = Literal["tags", "auto_tags", "color", "orientation", "license", "photographer"]
FACET_NAMES: tuple[FacetName, ...] = get_args(FacetName)
MAX_FACET_LIMIT = 100

_COUNTS_EXAMPLE: dict[str, Any] = {
    "over": "pool",
    "photos": 1000,
    "capped": True,
    "fields": {
        "tags": [{"value": "street", "count": 212}, {"value": "bicycle", "count": 97}],
        "license": [{"value": "royalty-free", "count": 640}, {"value": "cc-by", "count": 360}],
    },
}


def facet_names(value: object) -> object:
    """The `facets` parameter's names: a query string gives them comma-separated
    (`facets=tags,color`), repeated, or both; a JSON body as a list or one such string. Each
    once, in the order first given; an unknown name is refused with the names there are."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        return value  # pydantic refuses it as not a list
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            return value
        names.extend(n.strip() for n in item.split(",") if n.strip())
    unknown = [n for n in names if n not in FACET_NAMES]
    if unknown:
        raise ValueError(
            f"unknown facet {unknown[0][:40]!r}: the facets are {', '.join(FACET_NAMES)}"
        )
    return list(dict.fromkeys(names))


class FacetValue(BaseModel):
    """One value of a field and how many of the counted photos hold it."""

    value: str
    count: int = Field(description="Photos among those counted that hold the value (exact).")


class FacetCounts(BaseModel):
    """The values of each asked field among the photos that match the search, most held first."""

    model_config = ConfigDict(json_schema_extra={"examples": [_COUNTS_EXAMPLE]})

    over: Literal["score_threshold", "pool"] = Field(
        description="score_threshold: the photos counted are all those that match the "
        "filters and pass the score_threshold; pool: the first PHOTOSEARCH_API__FACET_POOL "
        "of the search's ranking (the candidates its pages are drawn from)."
    )
    photos: int = Field(description="How many photos were counted over.")
    capped: bool = Field(
        description="The photos counted reached PHOTOSEARCH_API__FACET_POOL: more match "
        "(or may match) than were counted."
    )
    fields: dict[str, list[FacetValue]] = Field(
        description="Each asked facet: its facet_limit most held values, most first (equal "
        "counts by value); a list field (tags, auto_tags, color) counts each photo once per "
        "value it holds."
    )
