"""A photo's visual attributes in the API's answers, and the colour a search filters by."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.embedding.attributes import NAMES, nearest_color
from core.payload import PhotoPayload

Orientation = Literal["landscape", "portrait", "square"]
PALETTE_TEXT = ", ".join(NAMES)

ATTRIBUTES_EXAMPLE: dict[str, Any] = {
    "width": 6000,
    "height": 4000,
    "aspect_ratio": 1.5,
    "orientation": "landscape",
    "colors": [{"name": "red", "share": 0.41}, {"name": "brown", "share": 0.33}],
    "copy_space": False,
}


class ColorShare(BaseModel):
    name: str = Field(description=f"A palette colour: {PALETTE_TEXT}.")
    share: float = Field(description="Its share of the photo's pixels, 0 to 1.")


class PhotoAttributes(BaseModel):
    """What the indexer saw in the photo's pixels when it embedded it."""

    model_config = ConfigDict(json_schema_extra={"examples": [ATTRIBUTES_EXAMPLE]})

    width: int = Field(description="The original's width in pixels, turned upright (EXIF).")
    height: int = Field(description="The original's height in pixels, turned upright (EXIF).")
    aspect_ratio: float = Field(description="width / height, to 3 decimals.")
    orientation: Orientation = Field(
        description="square when width / height is within 5% of 1, else landscape or portrait."
    )
    colors: list[ColorShare] = Field(
        description="The palette colours that cover at least 5% of the photo, the largest first."
    )
    copy_space: bool = Field(
        description="Mostly one plain colour: one colour covers at least 60% of the photo, "
        "evenly lit (room for a caption)."
    )


def attributes_of(payload: PhotoPayload) -> PhotoAttributes | None:
    """A stored photo's attributes; None for one indexed before they were computed."""
    if any(payload.get(name) is None for name in ("width", "height", "orientation")):
        return None
    shares: dict[str, float] = payload.get("color_shares") or {}
    return PhotoAttributes(
        width=payload["width"],
        height=payload["height"],
        aspect_ratio=payload.get("aspect_ratio") or round(payload["width"] / payload["height"], 3),
        orientation=payload["orientation"],
        colors=[ColorShare(name=n, share=shares.get(n, 0.0)) for n in payload.get("colors") or []],
        copy_space=bool(payload.get("copy_space")),
    )


def palette_color(value: object) -> object:
    """A filter's colour: a palette name (any case) as it is, a hex colour ("#1e90ff" or
    "1e90ff") as its nearest palette name; anything else is refused, naming the palette."""
    if not isinstance(value, str):
        return value  # None, or a type pydantic refuses itself
    name = value.strip().lower()
    if name in NAMES:
        return name
    try:
        return nearest_color(name)
    except ValueError:
        raise ValueError(
            f"unknown colour {value[:40]!r}: give one of {PALETTE_TEXT}, "
            "or a hex colour such as #1e90ff"
        ) from None


def query_flag(value: object) -> object:
    """A flag from a query string ("true", "false", "1", "0"; JSON's are strict booleans)."""
    if isinstance(value, str) and value.lower() in {"true", "false", "1", "0"}:
        return value.lower() in {"true", "1"}
    return value
