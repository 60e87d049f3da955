"""What every part of the vector store shares: vector and payload names, aliases, point ids,
collection names, and the types its methods take and return (the store: store.py)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Final, TypeVar

from core.embedding.arrays import Embeddings
from core.embedding.attributes import NAMES as PALETTE_NAMES
from core.payload import PhotoPayload

if TYPE_CHECKING:
    from core.settings import QdrantSettings

# The one dense named vector of every collection: the CLIP image embedding.
VECTOR_NAME = "image"
# The sparse named vector: the words of a photo's title, tags and photographer (and, weighed
# less, of its automatic tags), weighted for BM25 by core/keywords.py; the engine multiplies
# each word by its IDF over the collection.
KEYWORDS_VECTOR = "keywords"
# A photo's near-duplicate group: the id of the group's first photo (indexer/photo/duplicates.py).
GROUP_FIELD: Final = "dup_group"
# Blue-green: searches read LIVE_ALIAS; PREVIOUS_ALIAS keeps the collection a rollback returns to.
LIVE_ALIAS = "photos"
PREVIOUS_ALIAS = "photos-previous"
# The indexer's shard of a point: the lower bound of the range of source keys it was planned
# in (see indexer/plan/shards.py), and the key itself. Both indexed: a shard's points are read by
# its label, a changed file's point by its key.
SHARD_FIELD: Final = "shard"
KEY_FIELD: Final = "source_key"
# Payload fields with an index: the filters the search API offers, and the sync's identity.
KEYWORD_FIELDS = (
    "photo_id",
    "tags",
    "terms",  # the words of title and tags, which suggestions complete (core/terms.py)
    "photographer",
    "license",
    SHARD_FIELD,
    KEY_FIELD,
    GROUP_FIELD,
    # The visual filters (core/embedding/attributes.py) and the automatic tags.
    "auto_tags",
    "colors",
    "orientation",
)
DATETIME_FIELDS = ("created_at",)
# copy_space is a flag stored as 0 or 1: Qdrant Edge's Python binding turns a bool in a
# filter into an integer, which never matches a JSON true (engine.Flag).
INTEGER_FIELDS = ("model_version", "width", "height", "copy_space")
# A colour's share of a photo, for a filter's minimum share: one index per palette name; and
# a photo's popularity, which the popularity boost reads (core/vectorstore/boosts.py).
FLOAT_FIELDS: tuple[str, ...] = (
    *(f"color_shares.{name}" for name in PALETTE_NAMES),
    "popularity",
)
# A photo's automatic tags (indexer/photo/autotags.py), and the key of the vocabulary and rule that
# made them: a point whose key is not its version's current one is re-tagged by a sync.
AUTO_TAGS_FIELD: Final = "auto_tags"
TAGGED_WITH_FIELD: Final = "auto_tags_vocabulary"
# What points() reads of each point, and how many points a page holds.
POINT_FIELDS = [
    "photo_id",
    KEY_FIELD,
    "content_version",
    "meta_hash",
    SHARD_FIELD,
    "source_uri",
    TAGGED_WITH_FIELD,
]
SCROLL_PAGE = 1000
# Facets return at most this many shard labels: 1e8 photos in shards of 10,000 are 1e4.
MAX_SHARDS = 1_000_000

_NAMESPACE = uuid.UUID("5f0c6c1e-3f4e-4c3a-9a59-7d1e8b0c2a41")
_COLLECTION = re.compile(r"^photos-m(?P<version>\d+)-(?P<tag>[a-z0-9]+)$")


class StoreError(Exception):
    """The vector store refused or failed an operation."""


class CollectionNotFound(StoreError):
    """No collection or alias of that name."""


class KeywordsUnavailable(StoreError):
    """The collection has no keyword vector: a Qdrant server's collection built before keyword
    search (a server cannot add a named vector to a collection); a reindex builds one."""


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
    payload: PhotoPayload


@dataclass(frozen=True)
class SparseVector:
    """A sparse vector: word ids (core/keywords.py) and their weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Hit:
    """One search result; `vector` only where the search was asked for vectors."""

    photo_id: str
    score: float
    payload: PhotoPayload
    vector: Embeddings | None = None


@dataclass(frozen=True)
class StoredPhoto:
    """One stored photo, as retrieve returns it."""

    photo_id: str
    payload: PhotoPayload
    vector: Embeddings | None = None


@dataclass(frozen=True)
class IndexedPoint:
    """What the indexer compares with the source: a photo's identity, key, versions, shard."""

    photo_id: str
    key: str  # "" on points written before shards existed: see source_uri
    content_version: str
    meta_hash: str
    shard: str | None  # None: not labelled yet
    source_uri: str = ""
    auto_tags_vocabulary: str = ""  # "": written without automatic tags


def indexed_point(payload: PhotoPayload | None) -> IndexedPoint:
    p: PhotoPayload = payload or {}
    shard = p.get(SHARD_FIELD)
    return IndexedPoint(
        photo_id=str(p.get("photo_id", "")),
        key=str(p.get(KEY_FIELD) or ""),
        content_version=str(p.get("content_version", "")),
        meta_hash=str(p.get("meta_hash", "")),
        shard=None if shard is None else str(shard),
        source_uri=str(p.get("source_uri") or ""),
        auto_tags_vocabulary=str(p.get(TAGGED_WITH_FIELD) or ""),
    )


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
    # Automatic tags and visual attributes (core/embedding/attributes.py).
    auto_tags_all: tuple[str, ...] = ()
    color: str | None = None  # a palette name
    color_min_share: float = 0.0  # with color: its share of the photo at least this
    orientation: str | None = None
    min_width: int | None = None
    min_height: int | None = None
    copy_space: bool | None = None

    def is_empty(self) -> bool:
        return self == SearchFilter()


P = TypeVar("P")


@dataclass(frozen=True)
class SearchTuning:
    """How a search trades recall for speed: Qdrant's search-time parameters, which Qdrant Edge
    and a server take alike. With quantization the graph is walked on the quantized copies and
    the best limit x oversampling candidates are rescored with the original vectors."""

    hnsw_ef: int
    oversampling: float = 1.0
    ignore_quantization: bool = False  # walk the graph on the original vectors
    exact: bool = False  # every original vector compared: no graph, no quantized copies (the truth)
    # A filtered search walks past the points its filter rejects (ACORN): the recall of a
    # payload subgraph without one (core/vectorstore/schema.py). Unfiltered: nothing changes.
    acorn: bool = False

    @classmethod
    def of(cls, settings: QdrantSettings) -> SearchTuning:
        return cls(
            hnsw_ef=settings.hnsw_ef, oversampling=settings.oversampling, acorn=settings.acorn
        )

    def params(
        self,
        search: Callable[..., P],
        quantization: Callable[..., object],
        acorn: Callable[..., object],
    ) -> P:
        """These parameters as an engine's SearchParams, given its SearchParams,
        QuantizationSearchParams and AcornSearchParams classes (qdrant_edge's and
        qdrant_client's have the same fields). On a collection without quantized copies the
        quantization part does nothing."""
        return search(
            hnsw_ef=self.hnsw_ef,
            exact=self.exact,
            quantization=quantization(
                ignore=self.ignore_quantization or self.exact,
                rescore=True,
                oversampling=self.oversampling,
            ),
            acorn=acorn(enable=True) if self.acorn and not self.exact else None,
        )


@dataclass(frozen=True)
class CollectionInfo:
    """A collection, its model version, size and the aliases that point at it."""

    name: str
    model_version: int
    dim: int
    points: int
    aliases: tuple[str, ...]


def payload_fields(fields: Sequence[str] | None) -> list[str] | None:
    """The payload fields a read selects: these and photo_id (which names a point's photo);
    None: all of them."""
    return None if fields is None else list(dict.fromkeys(["photo_id", *fields]))
