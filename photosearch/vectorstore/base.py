"""What the indexer and the query API need from a vector store, whichever engine holds it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from photosearch.embedding.arrays import Embeddings

# The one named vector of every collection: the CLIP image embedding.
VECTOR_NAME = "image"
# Blue-green: searches read LIVE_ALIAS; PREVIOUS_ALIAS keeps the collection a rollback returns to.
LIVE_ALIAS = "photos"
PREVIOUS_ALIAS = "photos-previous"
# Payload fields with an index: the filters the search API offers, and the sync's identity.
KEYWORD_FIELDS = ("photo_id", "tags", "photographer", "license")
DATETIME_FIELDS = ("created_at",)
INTEGER_FIELDS = ("model_version",)
# What versions() reads of each point, and how many points a page holds.
VERSION_FIELDS = ["photo_id", "content_version", "meta_hash"]
SCROLL_PAGE = 1000

_NAMESPACE = uuid.UUID("5f0c6c1e-3f4e-4c3a-9a59-7d1e8b0c2a41")
_COLLECTION = re.compile(r"^photos-m(?P<version>\d+)-(?P<tag>[a-z0-9]+)$")


class StoreError(Exception):
    """The vector store refused or failed an operation."""


class CollectionNotFound(StoreError):
    """No collection or alias of that name."""


def point_id(photo_id: str) -> str:
    """The point id of a photo: a UUID derived from its identity, so rewrites replace it."""
    return str(uuid.uuid5(_NAMESPACE, photo_id))


def collection_name(model_version: int, tag: str) -> str:
    """A collection's name carries the model version that embedded it: photos-m2-<tag>."""
    name = f"photos-m{model_version}-{tag.lower()}"
    if not _COLLECTION.match(name):
        raise ValueError(f"bad collection tag {tag!r}: use lowercase letters and digits")
    return name


def model_version_of(collection: str) -> int:
    """The model version a collection was built with (from its name)."""
    match = _COLLECTION.match(collection)
    if match is None:
        raise StoreError(f"{collection!r} is not a PhotoSearch collection name")
    return int(match["version"])


@dataclass(frozen=True)
class PhotoPoint:
    """One photo to write: its embedding and its payload (which holds `photo_id`)."""

    photo_id: str
    vector: Embeddings  # float32 [D], L2-normalized
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    """One search result."""

    photo_id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class StoredPhoto:
    """One stored photo, as retrieve returns it."""

    photo_id: str
    payload: dict[str, Any]
    vector: Embeddings | None = None


@dataclass(frozen=True)
class IndexedVersion:
    """What the sync compares with the source: a photo's identity and versions."""

    photo_id: str
    content_version: str
    meta_hash: str


@dataclass(frozen=True)
class SearchFilter:
    """Metadata filters; every given condition must hold."""

    tags_any: tuple[str, ...] = ()
    tags_all: tuple[str, ...] = ()
    photographer: str | None = None
    license: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    exclude_ids: tuple[str, ...] = field(default=())

    def is_empty(self) -> bool:
        return self == SearchFilter()


@dataclass(frozen=True)
class CollectionInfo:
    """A collection, its model version, size and the aliases that point at it."""

    name: str
    model_version: int
    dim: int
    points: int
    aliases: tuple[str, ...]


class VectorStore(Protocol):
    """The store API. Every method is blocking; the API calls it from a thread pool."""

    def create_collection(self, name: str, dim: int) -> None:
        """Create an empty collection (with its payload indexes); an existing one is kept."""

    def has_collection(self, name: str) -> bool:
        """Whether a collection (not an alias) of that name exists."""

    def drop_collection(self, name: str) -> None:
        """Delete a collection; refused (StoreError) while an alias points at it."""

    def collections(self) -> list[CollectionInfo]:
        """All collections, oldest name first."""

    def aliases(self) -> dict[str, str]:
        """Alias -> collection."""

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        """Point each alias at a collection (None removes it), all in one atomic step."""

    def resolve(self, name: str) -> str:
        """The collection an alias points at, or the collection itself; CollectionNotFound."""

    def upsert(self, collection: str, points: Sequence[PhotoPoint]) -> None:
        """Write points (id = point_id(photo_id)), replacing vector and payload; durable."""

    def set_payload(self, collection: str, photo_id: str, payload: dict[str, Any]) -> None:
        """Replace a stored photo's payload and keep its vector."""

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        """Delete photos by identity; unknown ids are ignored."""

    def count(self, collection: str) -> int:
        """Exact number of points."""

    def versions(self, collection: str) -> Iterator[IndexedVersion]:
        """Every stored photo's identity and versions, paged, without vectors."""

    def search(
        self,
        collection: str,
        vector: Embeddings,
        *,
        limit: int,
        offset: int = 0,
        filter: SearchFilter | None = None,
        score_threshold: float | None = None,
    ) -> list[Hit]:
        """Nearest photos by cosine similarity, best first."""

    def retrieve(
        self, collection: str, photo_ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPhoto]:
        """Stored photos by identity, in the order asked; missing ones are left out."""

    def optimize(self, collection: str) -> None:
        """Build the search index now where the engine does not do it in the background."""

    def close(self) -> None:
        """Flush and release the store."""
