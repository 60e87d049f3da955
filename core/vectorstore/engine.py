"""The few primitives an engine offers the store (`Engine`) and the engine-neutral requests they
take: filters, queries, scrolls and writes, which each engine translates to its own API."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, overload

import numpy as np

from core.embedding.arrays import Embeddings
from core.payload import PhotoPayload, payload_of
from core.vectorstore.base import (
    SCROLL_PAGE,
    VECTOR_NAME,
    Hit,
    SearchTuning,
    SparseVector,
    StoredPhoto,
)
from core.vectorstore.schema import FieldIndex

# ---- Filters: every condition of `must` holds and none of `must_not`.


@dataclass(frozen=True)
class Match:
    """The payload field holds one of these values (a list field: one of its items does)."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class DateRange:
    """The payload field is a date within these bounds (inclusive; None: open)."""

    field: str
    since: datetime | None
    until: datetime | None


@dataclass(frozen=True)
class Range:
    """The payload field is a number within these bounds (inclusive; None: open)."""

    field: str
    gte: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class Flag:
    """The payload field holds this flag, stored as 0 or 1: Qdrant Edge 0.9's Python binding
    reads a bool in a condition as an integer, so a payload's JSON true could never match."""

    field: str
    value: bool


@dataclass(frozen=True)
class HasIds:
    point_ids: frozenset[str]


@dataclass(frozen=True)
class IsEmpty:
    """The payload field is missing, null or empty."""

    field: str


@dataclass(frozen=True)
class HasVector:
    """The point has this named vector."""

    name: str


@dataclass(frozen=True)
class Where:
    must: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()


Leaf = Match | DateRange | Range | Flag | HasIds | IsEmpty | HasVector
Condition = Leaf | Where

# ---- Queries: what scores a point.


@dataclass(frozen=True)
class Nearest:
    """Similarity to a dense or a sparse vector of the named vector `using`."""

    vector: list[float] | SparseVector
    using: str


@dataclass(frozen=True)
class Recommend:
    """Qdrant's recommendation, best-score strategy: like a positive example more than like
    any negative one."""

    positive: tuple[list[float], ...]
    negative: tuple[list[float], ...]
    using: str = VECTOR_NAME


@dataclass(frozen=True)
class Rrf:
    """Reciprocal rank fusion of the prefetches, as Qdrant counts it: a point at rank r (from
    1) of a prefetch adds 1 / (k - 1 + r / w), where w is its weight: 1 unless `weights`
    gives them in the prefetches' order (both engines shorten a weighted ranking's ranks)."""

    k: int
    weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Boosted:
    """The prefetch's score plus business boosts, a formula the engine evaluates (Qdrant's
    formula query): score + recency_weight x 0.5^(age / recency_half_life_s), age being
    |now - created_at| (0 for a photo without created_at), + popularity_weight x
    p / (p + popularity_half), p the payload's `popularity` (0 when missing)."""

    recency_weight: float
    recency_half_life_s: float
    now: datetime
    popularity_weight: float
    popularity_half: float


Query = Nearest | Recommend | Rrf | Boosted


@dataclass(frozen=True)
class Prefetch:
    """Candidates for the query above it: the best `limit` by its query, which may itself
    rank its own prefetches (a fusion)."""

    query: Nearest | Recommend | Rrf
    limit: int
    filter: Where | None = None
    score_threshold: float | None = None
    tuning: SearchTuning | None = None  # None: no search parameters (the exact sparse index)
    prefetches: tuple[Prefetch, ...] = ()


@dataclass(frozen=True)
class Search:
    """One query; `fields`: the payload fields each hit carries (None: its whole payload)."""

    query: Query
    limit: int
    offset: int = 0
    prefetches: tuple[Prefetch, ...] = ()
    filter: Where | None = None
    score_threshold: float | None = None
    tuning: SearchTuning | None = None
    fields: tuple[str, ...] | None = None
    with_vector: bool = False


@dataclass(frozen=True)
class Retrieve:
    """The points of these ids; `fields`: the payload fields each carries (None: all)."""

    point_ids: tuple[str, ...]
    fields: tuple[str, ...] | None = None
    with_vector: bool = False


@dataclass(frozen=True)
class Scroll:
    """One page of the points that match, in point id order, from `offset` (an engine's point
    id that the previous page returned; None: the first page)."""

    filter: Where | None
    limit: int
    offset: object | None = None
    fields: tuple[str, ...] | None = None
    with_vector: bool = False


# ---- Writes, applied in order.


@dataclass(frozen=True)
class NewPoint:
    point_id: str
    vectors: Mapping[str, list[float] | SparseVector]
    payload: PhotoPayload


@dataclass(frozen=True)
class Upsert:
    points: tuple[NewPoint, ...]


@dataclass(frozen=True)
class SetPayload:
    """Merge these payload fields into the points' payloads."""

    point_ids: tuple[str, ...]
    payload: PhotoPayload


@dataclass(frozen=True)
class SetVectors:
    """Write these named vectors of points (point id -> name -> vector), keeping the others."""

    vectors: Mapping[str, Mapping[str, SparseVector]]


@dataclass(frozen=True)
class DeleteVectors:
    point_ids: tuple[str, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class DeletePoints:
    """Delete the points with these ids, or those that match a filter."""

    point_ids: tuple[str, ...] = ()
    where: Where | None = None


Write = Upsert | SetPayload | SetVectors | DeleteVectors | DeletePoints


class Engine(Protocol):
    """One engine under the store. Collections may be named by an alias wherever a collection
    is asked for; a missing one raises CollectionNotFound, every other failure StoreError."""

    def names(self) -> set[str]:
        """The collections (not the aliases)."""

    def dim(self, name: str) -> int:
        """The dimension of a collection's embedding."""

    def create(self, name: str, dim: int, *, bulk: bool, indexes: Mapping[str, FieldIndex]) -> int:
        """Create a collection with these payload indexes, unless it exists; the dimension
        of the collection of that name. bulk: see VectorStore.create_collection."""

    def create_indexes(self, collection: str, indexes: Mapping[str, FieldIndex]) -> None:
        """Create the payload indexes among these that the collection lacks."""

    def has_keywords(self, collection: str) -> bool:
        """Whether the collection has the keywords vector (and its photos theirs)."""

    def add_keywords(self, collection: str, fill: Callable[[], object]) -> bool:
        """Give a collection without it the keywords vector, run `fill` to write its photos',
        and record that it has them; False (nothing done) where the engine cannot add a
        vector to a collection."""

    def drop(self, name: str) -> None:
        """Delete a collection (the store checked that no alias points at it)."""

    def aliases(self) -> dict[str, str]:
        """Alias -> collection."""

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        """Point the aliases at collections (None: remove), atomically; the store checked the
        names."""

    def finish_bulk_load(self, collection: str) -> None: ...

    def index_ready(self, collection: str) -> bool: ...

    def optimize(self, collection: str) -> None: ...

    def close(self) -> None: ...

    def update(self, collection: str, writes: Sequence[Write]) -> None:
        """Apply the writes in order, durably."""

    def query(self, collection: str, search: Search) -> list[Hit]:
        """The hits of a search, best first."""

    def query_batch(self, collection: str, searches: Sequence[Search]) -> list[list[Hit]]:
        """The hits of each search, best first, all asked in one request."""

    def scroll(self, collection: str, request: Scroll) -> tuple[list[StoredPhoto], object | None]:
        """A page of points and the offset of the next page (None: the last)."""

    def retrieve(self, collection: str, request: Retrieve) -> list[StoredPhoto]:
        """The stored points among the request's ids, in any order."""

    def count(self, collection: str) -> int:
        """Exact number of points."""

    def facet(
        self, collection: str, field: str, *, limit: int, exact: bool, where: Where | None = None
    ) -> list[tuple[str, int]]:
        """The values of a payload field and how many points hold each, most first; only the
        points that match `where` are counted (None: all)."""


F = TypeVar("F")
# An engine's translation of one condition.
LeafOf = Callable[[Leaf], object]


@overload
def filter_of(w: Where, leaf: LeafOf, make: Callable[..., F]) -> F: ...


@overload
def filter_of(w: Where | None, leaf: LeafOf, make: Callable[..., F]) -> F | None: ...


def filter_of(w: Where | None, leaf: LeafOf, make: Callable[..., F]) -> F | None:
    """A filter in an engine's classes: `make`, its Filter class (Qdrant Edge's and
    qdrant-client's take the same must and must_not lists), over `leaf`, its translation of
    one condition; a nested filter is a condition of the one above it."""
    if w is None:
        return None

    def one(c: Condition) -> object:
        return filter_of(c, leaf, make) if isinstance(c, Where) else leaf(c)

    return make(
        must=[one(c) for c in w.must] or None,
        must_not=[one(c) for c in w.must_not] or None,
    )


def vectors(with_vector: bool) -> list[str] | bool:
    """The named vectors a read returns, as both engines take them: the embedding or none."""
    return [VECTOR_NAME] if with_vector else False


def embedding_of(vectors: object) -> Embeddings | None:
    """The embedding among a point's named vectors, if it was read."""
    vector = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
    return None if vector is None else np.asarray(vector, dtype=np.float32)


def hit_of(score: float, payload: Mapping[str, Any] | None, vectors: object) -> Hit:
    found = payload_of(payload)
    return Hit(str(found.get("photo_id")), score, found, embedding_of(vectors))


def stored_of(payload: Mapping[str, Any] | None, vectors: object) -> StoredPhoto:
    found = payload_of(payload)
    return StoredPhoto(str(found.get("photo_id")), found, embedding_of(vectors))


def pages(
    engine: Engine,
    collection: str,
    where: Where | None,
    *,
    fields: tuple[str, ...] | None,
    vector: bool = False,
    page: int = SCROLL_PAGE,
) -> Iterator[list[StoredPhoto]]:
    """The points that match, a page at a time: one engine call each, so a caller may keep
    the generator suspended for long."""
    offset: object | None = None
    while True:
        found, offset = engine.scroll(collection, Scroll(where, page, offset, fields, vector))
        if found:
            yield found
        if offset is None:
            return
