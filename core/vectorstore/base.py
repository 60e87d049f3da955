"""What the indexer and the query API need from a vector store, whichever engine holds it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.embedding.arrays import Embeddings

if TYPE_CHECKING:
    from core.settings import QdrantSettings

# The one dense named vector of every collection: the CLIP image embedding.
VECTOR_NAME = "image"
# The sparse named vector: the words of a photo's title, tags and photographer, weighted for
# BM25 by core/keywords.py; the engine multiplies each word by its IDF over the collection.
KEYWORDS_VECTOR = "keywords"
# A photo's near-duplicate group: the id of the group's first photo (indexer/duplicates.py).
GROUP_FIELD = "dup_group"
# Blue-green: searches read LIVE_ALIAS; PREVIOUS_ALIAS keeps the collection a rollback returns to.
LIVE_ALIAS = "photos"
PREVIOUS_ALIAS = "photos-previous"
# The indexer's shard of a point: the lower bound of the range of source keys it was planned
# in (see indexer/shards.py), and the key itself. Both indexed: a shard's points are read by
# its label, a changed file's point by its key.
SHARD_FIELD = "shard"
KEY_FIELD = "source_key"
# Payload fields with an index: the filters the search API offers, and the sync's identity.
KEYWORD_FIELDS = (
    "photo_id",
    "tags",
    "photographer",
    "license",
    SHARD_FIELD,
    KEY_FIELD,
    GROUP_FIELD,
)
DATETIME_FIELDS = ("created_at",)
INTEGER_FIELDS = ("model_version",)
# What points() reads of each point, and how many points a page holds.
POINT_FIELDS = ["photo_id", KEY_FIELD, "content_version", "meta_hash", SHARD_FIELD, "source_uri"]
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
    payload: dict[str, Any]


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
    payload: dict[str, Any]
    vector: Embeddings | None = None


@dataclass(frozen=True)
class StoredPhoto:
    """One stored photo, as retrieve returns it."""

    photo_id: str
    payload: dict[str, Any]
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


def indexed_point(payload: Mapping[str, Any] | None) -> IndexedPoint:
    p = payload or {}
    shard = p.get(SHARD_FIELD)
    return IndexedPoint(
        photo_id=str(p.get("photo_id", "")),
        key=str(p.get(KEY_FIELD) or ""),
        content_version=str(p.get("content_version", "")),
        meta_hash=str(p.get("meta_hash", "")),
        shard=None if shard is None else str(shard),
        source_uri=str(p.get("source_uri") or ""),
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

    def is_empty(self) -> bool:
        return self == SearchFilter()


P = TypeVar("P")


@dataclass(frozen=True)
class SearchTuning:
    """How a search trades recall for speed: Qdrant's search-time parameters, which Qdrant Edge
    and a server take alike. With int8 quantization the graph is walked on the int8 copies and
    the best limit x oversampling candidates are rescored with the original vectors."""

    hnsw_ef: int
    oversampling: float = 1.0
    ignore_quantization: bool = False  # walk the graph on the original vectors
    exact: bool = False  # compare every original vector: no graph, no int8 (the ground truth)

    @classmethod
    def of(cls, settings: QdrantSettings) -> SearchTuning:
        return cls(hnsw_ef=settings.hnsw_ef, oversampling=settings.oversampling)

    def params(self, search: Callable[..., P], quantization: Callable[..., object]) -> P:
        """These parameters as an engine's SearchParams, given its SearchParams and
        QuantizationSearchParams classes (qdrant_edge's and qdrant_client's have the same
        fields). On a collection without int8 copies the quantization part does nothing."""
        return search(
            hnsw_ef=self.hnsw_ef,
            exact=self.exact,
            quantization=quantization(
                ignore=self.ignore_quantization or self.exact,
                rescore=True,
                oversampling=self.oversampling,
            ),
        )


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

    def create_collection(self, name: str, dim: int, *, bulk: bool = False) -> None:
        """Create an empty collection (with its payload indexes); an existing one is kept.

        bulk: it is about to be loaded with every photo: a server defers its search index
        until finish_bulk_load (Qdrant's advice for large uploads)."""

    def ensure_indexes(self, collection: str) -> None:
        """Create the payload indexes a collection of an older release lacks."""

    def finish_bulk_load(self, collection: str) -> None:
        """Build the search index of a bulk-loaded collection (a server: in the background)."""

    def index_ready(self, collection: str) -> bool:
        """Whether the search index is built and every optimization has finished."""

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
        """Write a stored photo's payload fields, merged (fields not named, such as GROUP_FIELD,
        are kept), and its keywords vector from the new payload; the embedding is kept."""

    def set_payloads(self, collection: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """set_payload for many photos (photo id -> payload), in one request."""

    def set_shard(self, collection: str, shard: str, photo_ids: Sequence[str]) -> None:
        """Label photos with a shard, keeping the rest of their payload."""

    def set_group(self, collection: str, group: str, photo_ids: Sequence[str]) -> None:
        """Put photos in a near-duplicate group (GROUP_FIELD), keeping the rest of their
        payload."""

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        """Delete photos by identity; unknown ids are ignored."""

    def delete_in_shard(self, collection: str, shard: str | None, photo_ids: Sequence[str]) -> None:
        """Delete photos by identity only while they still carry this shard label (None: no
        label): a photo that moved to another shard meanwhile is left to that shard."""

    def count(self, collection: str) -> int:
        """Exact number of points."""

    def shard_sizes(self, collection: str) -> dict[str, int]:
        """Each shard label of the collection and its exact number of points."""

    def shard_labels(self, collection: str) -> list[str]:
        """The shard labels that have points, read off the payload index (no point is
        counted: its cost is the number of shards, not of points)."""

    def points(
        self, collection: str, *, shard: str | None = None, unlabelled: bool = False
    ) -> Iterator[IndexedPoint]:
        """Stored photos' identities and versions, paged, without vectors: those of one shard,
        those without a shard label (unlabelled), or all (small collections and tests)."""

    def points_by_id(self, collection: str, photo_ids: Sequence[str]) -> list[IndexedPoint]:
        """The stored photos among these identities (no vectors); missing ones left out."""

    def points_by_key(self, collection: str, keys: Sequence[str]) -> list[IndexedPoint]:
        """The stored photos whose source key is among these."""

    def search(
        self,
        collection: str,
        vector: Embeddings,
        *,
        limit: int,
        offset: int = 0,
        filter: SearchFilter | None = None,
        score_threshold: float | None = None,
        tuning: SearchTuning | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        """Nearest photos by cosine similarity, best first; `tuning` replaces the store's
        search parameters for this search (exact search, the recall benchmark)."""

    def keyword_search(
        self,
        collection: str,
        keywords: SparseVector,
        *,
        limit: int,
        filter: SearchFilter | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        """Photos whose title, tags or photographer hold the query's words, best BM25 score
        first (core.keywords.query_vector); KeywordsUnavailable on a collection without them."""

    def hybrid_search(
        self,
        collection: str,
        vector: Embeddings,
        keywords: SparseVector,
        *,
        limit: int,
        rrf_k: int,
        filter: SearchFilter | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        """The `limit` nearest photos and the `limit` best by keywords, fused in one query by
        reciprocal rank fusion (a photo at rank r of a ranking adds 1 / (rrf_k + r)), best
        first, ties by photo id; KeywordsUnavailable on a collection without keywords."""

    def recommend(
        self,
        collection: str,
        positive: Sequence[Embeddings],
        negative: Sequence[Embeddings],
        *,
        limit: int,
        offset: int = 0,
        filter: SearchFilter | None = None,
        score_threshold: float | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        """More like the positive examples and not like the negative ones (Qdrant's
        recommendation query, best-score strategy), best first."""

    def neighbours_each(
        self,
        collection: str,
        vectors: Embeddings,
        *,
        score_threshold: float,
        limit: int,
        exclude_ids: Sequence[str] = (),
        fields: Sequence[str] | None = None,
    ) -> list[list[Hit]]:
        """For each vector of [N, D], its `limit` nearest stored photos at or above the
        threshold (not among exclude_ids), best first; one batched query. A reindex's grouping
        pass (indexer/regroup.py). fields: the payload fields each hit carries besides
        photo_id (None: its whole payload)."""

    def group_members(
        self,
        collection: str,
        groups: Sequence[str],
        *,
        filter: SearchFilter | None = None,
        limit_each: int = 100,
    ) -> dict[str, list[str]]:
        """The photo ids of each near-duplicate group (GROUP_FIELD) that match the filter, at
        most limit_each a group, in photo id order; groups without any are left out."""

    def group_sizes(self, collection: str, *, limit: int) -> list[tuple[str, int]]:
        """The largest near-duplicate groups of two or more photos: (group, size), largest
        first, then by group."""

    def retrieve(
        self,
        collection: str,
        photo_ids: Sequence[str],
        *,
        with_vectors: bool = False,
        fields: Sequence[str] | None = None,
    ) -> list[StoredPhoto]:
        """Stored photos by identity, in the order asked; missing ones are left out. fields:
        the payload fields read besides photo_id (None: the whole payload)."""

    def shard_vectors(
        self, collection: str, shard: str, *, fields: Sequence[str] = (), page: int = SCROLL_PAGE
    ) -> Iterator[list[StoredPhoto]]:
        """One shard's photos with their embeddings and only these payload fields (and
        photo_id), `page` at a time: a whole-collection pass reads no more than it uses."""

    def optimize(self, collection: str) -> None:
        """Build the search index now where the engine does not do it in the background."""

    def close(self) -> None:
        """Flush and release the store."""


def nearest_each(
    store: VectorStore,
    collection: str,
    vectors: Embeddings,
    *,
    score_threshold: float,
    exclude_ids: Sequence[str] = (),
) -> list[Hit | None]:
    """For each vector of [N, D], its nearest stored photo at or above the threshold (not one
    of exclude_ids), or None; one batched query. The indexer's near-duplicate groups."""
    # The grouping reads a neighbour's id and group label only (indexer/duplicates.py).
    found = store.neighbours_each(
        collection,
        vectors,
        score_threshold=score_threshold,
        limit=1,
        exclude_ids=exclude_ids,
        fields=(GROUP_FIELD,),
    )
    return [hits[0] if hits else None for hits in found]


def payload_fields(fields: Sequence[str] | None) -> list[str] | None:
    """The payload fields a read selects: these and photo_id (which names a point's photo);
    None: all of them."""
    return None if fields is None else list(dict.fromkeys(["photo_id", *fields]))
