"""The catalogue joined with each photo's popularity, so every write of its payload stores it."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from core.feedback.popularity import Popularity
from core.payload import PhotoPayload
from core.vectorstore.boosts import POPULARITY
from indexer.plan.catalog import Photo


def from_metadata(metadata: PhotoPayload | None) -> float | None:
    """A manifest's own popularity (`extra.popularity`, a column of that name), if a number
    >= 0: the catalogue's figure for a photo without events."""
    extra = (metadata or {}).get("extra") or {}
    value = extra.get(POPULARITY) if isinstance(extra, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number >= 0 else None


def with_value(photo: Photo, value: float | None) -> Photo:
    """The photo with its popularity in its metadata and in its meta_hash (a change of it is
    a payload change, which the planner writes and change capture logs); None: as it is."""
    if value is None:
        return photo
    metadata: PhotoPayload = {**(photo.metadata or {}), POPULARITY: value}
    mixed = hashlib.sha256(f"{photo.meta_hash}|{POPULARITY}={value!r}".encode()).hexdigest()
    return replace(photo, metadata=metadata, meta_hash=mixed[:16])


def joined(photos: Sequence[Photo], popularity: Popularity | None) -> list[Photo]:
    """Each photo with its popularity: from the feedback events where it has an entry, else
    the manifest's; none without either (its payload has no `popularity`: 0 to the boost)."""
    events = popularity.lookup([p.photo_id for p in photos]) if popularity else {}
    return [with_value(p, events.get(p.photo_id, from_metadata(p.metadata))) for p in photos]
