"""The vector store, written once over an engine: its searches and writes as neutral requests
(core/vectorstore/engine.py) that Qdrant Edge and a Qdrant server each translate."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import filters
from core.vectorstore.base import (
    DATETIME_FIELDS,
    GROUP_FIELD,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    KEYWORDS_VECTOR,
    MAX_SHARDS,
    POINT_FIELDS,
    SCROLL_PAGE,
    SHARD_FIELD,
    VECTOR_NAME,
    CollectionInfo,
    CollectionNotFound,
    Hit,
    IndexedPoint,
    KeywordsUnavailable,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    SparseVector,
    StoredPhoto,
    StoreError,
    indexed_point,
    model_version_of,
    payload_fields,
    point_id,
)
from core.vectorstore.engine import (
    DeletePoints,
    Engine,
    FieldKind,
    Match,
    Nearest,
    NewPoint,
    Prefetch,
    Recommend,
    Retrieve,
    Rrf,
    Search,
    SetPayload,
    Upsert,
    pages,
)
from core.vectorstore.keyword_vectors import dense, fill_keywords, keyword_writes, point_vectors

PAYLOAD_INDEXES: dict[str, FieldKind] = {
    **dict.fromkeys(KEYWORD_FIELDS, "keyword"),
    **dict.fromkeys(DATETIME_FIELDS, "datetime"),
    **dict.fromkeys(INTEGER_FIELDS, "integer"),
}


class Store:
    """A VectorStore on an engine. Every method is blocking; the API calls it from threads."""

    def __init__(self, engine: Engine, tuning: SearchTuning) -> None:
        self._engine = engine
        self._tuning = tuning
        # Alias changes and drops are checked, then done: one at a time in this process.
        self._admin = threading.Lock()

    # ---- Collections and aliases

    def create_collection(self, name: str, dim: int, *, bulk: bool = False) -> None:
        model_version_of(name)  # only PhotoSearch names: they are also safe folder names
        with self._admin:
            if name in self._engine.aliases():
                raise StoreError(f"{name!r} is an alias")
            found = self._engine.create(name, dim, bulk=bulk, indexes=PAYLOAD_INDEXES)
        if found != dim:
            raise StoreError(f"collection {name!r} has dim {found}, not {dim}")

    def ensure_indexes(self, collection: str) -> None:
        name = self.resolve(collection)
        self._engine.create_indexes(name, PAYLOAD_INDEXES)
        if not self._engine.has_keywords(name):
            self._engine.add_keywords(name, partial(fill_keywords, self._engine, name))

    def finish_bulk_load(self, collection: str) -> None:
        self._engine.finish_bulk_load(collection)

    def index_ready(self, collection: str) -> bool:
        return self._engine.index_ready(collection)

    def optimize(self, collection: str) -> None:
        self._engine.optimize(collection)

    def has_collection(self, name: str) -> bool:
        return name in self._engine.names()

    def drop_collection(self, name: str) -> None:
        with self._admin:
            if name not in self._engine.names():
                raise CollectionNotFound(name)
            aliased = sorted(a for a, target in self._engine.aliases().items() if target == name)
            if aliased:
                raise StoreError(f"collection {name!r} is aliased by {', '.join(aliased)}")
            self._engine.drop(name)

    def collections(self) -> list[CollectionInfo]:
        versions: dict[str, int] = {}
        for name in self._engine.names():
            try:
                versions[name] = model_version_of(name)
            except StoreError:
                continue  # a shared server holds other applications' collections too
        aliases = self._engine.aliases()
        infos = []
        for name in sorted(versions, key=lambda n: (versions[n], n)):
            try:
                dim, points = self._engine.dim(name), self._engine.count(name)
            except CollectionNotFound:
                continue  # dropped meanwhile
            aliased = tuple(sorted(a for a, t in aliases.items() if t == name))
            infos.append(CollectionInfo(name, versions[name], dim, points, aliased))
        return infos

    def aliases(self) -> dict[str, str]:
        return self._engine.aliases()

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        with self._admin:
            names = self._engine.names()
            for alias, target in targets.items():
                if alias in names:
                    raise StoreError(f"{alias!r} is a collection, not an alias")
                if target is not None and target not in names:
                    raise CollectionNotFound(target)
            self._engine.set_aliases(targets)

    def resolve(self, name: str) -> str:
        target = self._engine.aliases().get(name)
        if target is not None:
            return target
        if name in self._engine.names():
            return name
        raise CollectionNotFound(name)

    def close(self) -> None:
        self._engine.close()

    # ---- Writes

    def upsert(self, collection: str, points: Sequence[PhotoPoint]) -> None:
        if not points:
            return
        # A collection of an earlier release has no keywords vector to write to.
        keywords = self._engine.has_keywords(collection)
        new = []
        for p in points:
            payload = {**p.payload, "photo_id": p.photo_id}
            vectors = point_vectors(dense(p.vector), payload if keywords else {})
            new.append(NewPoint(point_id(p.photo_id), vectors, payload))
        self._engine.update(collection, [Upsert(tuple(new))])

    def set_payload(self, collection: str, photo_id: str, payload: dict[str, Any]) -> None:
        self.set_payloads(collection, {photo_id: payload})

    def set_payloads(self, collection: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        if not payloads:
            return
        written = {pid: {**payload, "photo_id": pid} for pid, payload in payloads.items()}
        # The keywords first: the payload's meta_hash says the photo is up to date. The payload
        # is merged, so fields it does not name (the indexer's group label) are kept.
        writes = keyword_writes(written) if self._engine.has_keywords(collection) else []
        writes += [SetPayload((point_id(pid),), p) for pid, p in written.items()]
        self._engine.update(collection, writes)

    def _label(self, collection: str, field: str, value: str, photo_ids: Sequence[str]) -> None:
        if photo_ids:
            ids = tuple(point_id(pid) for pid in photo_ids)
            self._engine.update(collection, [SetPayload(ids, {field: value})])

    def set_shard(self, collection: str, shard: str, photo_ids: Sequence[str]) -> None:
        self._label(collection, SHARD_FIELD, shard, photo_ids)

    def set_group(self, collection: str, group: str, photo_ids: Sequence[str]) -> None:
        self._label(collection, GROUP_FIELD, group, photo_ids)

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        if photo_ids:
            ids = tuple(point_id(pid) for pid in photo_ids)
            self._engine.update(collection, [DeletePoints(point_ids=ids)])

    def delete_in_shard(self, collection: str, shard: str | None, photo_ids: Sequence[str]) -> None:
        if photo_ids:
            where = filters.in_shard(shard, photo_ids)
            self._engine.update(collection, [DeletePoints(where=where)])

    # ---- Reads of points

    def count(self, collection: str) -> int:
        return self._engine.count(collection)

    def shard_sizes(self, collection: str) -> dict[str, int]:
        return dict(self._engine.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=True))

    def shard_labels(self, collection: str) -> list[str]:
        # Not exact: the payload index's own counts, at the cost of the shards and not of the
        # points (an exact facet reads every point: 150 ms at 1e6 on Edge); a label with no
        # point left is not among them.
        found = self._engine.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=False)
        return [label for label, count in found if count]

    def points(
        self, collection: str, *, shard: str | None = None, unlabelled: bool = False
    ) -> Iterator[IndexedPoint]:
        where = filters.shard_filter(shard, unlabelled=unlabelled)
        for page in pages(self._engine, collection, where, fields=tuple(POINT_FIELDS)):
            yield from (indexed_point(p.payload) for p in page)

    def points_by_id(self, collection: str, photo_ids: Sequence[str]) -> list[IndexedPoint]:
        if not photo_ids:
            return []
        ids = tuple(point_id(pid) for pid in photo_ids)
        found = self._engine.retrieve(collection, Retrieve(ids, tuple(POINT_FIELDS)))
        return [indexed_point(p.payload) for p in found]

    def points_by_key(self, collection: str, keys: Sequence[str]) -> list[IndexedPoint]:
        if not keys:
            return []
        where = filters.with_keys(keys)
        found = pages(self._engine, collection, where, fields=tuple(POINT_FIELDS))
        return [indexed_point(p.payload) for page in found for p in page]

    def retrieve(
        self,
        collection: str,
        photo_ids: Sequence[str],
        *,
        with_vectors: bool = False,
        fields: Sequence[str] | None = None,
    ) -> list[StoredPhoto]:
        if not photo_ids:
            return []
        ids = tuple(point_id(pid) for pid in photo_ids)
        selected = payload_fields(fields)
        request = Retrieve(ids, None if selected is None else tuple(selected), with_vectors)
        records = self._engine.retrieve(collection, request)
        found = {photo.photo_id: photo for photo in records}
        return [found[pid] for pid in dict.fromkeys(photo_ids) if pid in found]

    def shard_vectors(
        self, collection: str, shard: str, *, fields: Sequence[str] = (), page: int = SCROLL_PAGE
    ) -> Iterator[list[StoredPhoto]]:
        where = filters.shard_filter(shard)
        selected = tuple(payload_fields(fields) or ())
        return pages(self._engine, collection, where, fields=selected, vector=True, page=page)

    def group_members(
        self,
        collection: str,
        groups: Sequence[str],
        *,
        filter: SearchFilter | None = None,
        limit_each: int = 100,
    ) -> dict[str, list[str]]:
        if not groups:
            return {}
        in_groups = Match(GROUP_FIELD, tuple(dict.fromkeys(groups)))
        where = filters.both(in_groups, filters.search_filter(filter))
        members: dict[str, list[str]] = {}
        for page in pages(self._engine, collection, where, fields=("photo_id", GROUP_FIELD)):
            for p in page:
                members.setdefault(str(p.payload[GROUP_FIELD]), []).append(p.photo_id)
        # Point ids are not in photo id order: the whole group is read to take its first ones.
        return {group: sorted(ids)[:limit_each] for group, ids in sorted(members.items())}

    def group_sizes(self, collection: str, *, limit: int) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        # The facet counts the largest groups first: `limit` of them hold the largest of two
        # or more, unless fewer than `limit` have two.
        found = self._engine.facet(collection, GROUP_FIELD, limit=limit, exact=True)
        sizes = [(group, count) for group, count in found if count >= 2]
        return sorted(sizes, key=lambda size: (-size[1], size[0]))

    # ---- Searches

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
        return self._engine.query(
            collection,
            Search(
                Nearest(dense(vector), VECTOR_NAME),
                limit,
                offset,
                filter=filters.search_filter(filter),
                score_threshold=score_threshold,
                tuning=tuning or self._tuning,
                with_vector=with_vectors,
            ),
        )

    def _check_keywords(self, collection: str) -> None:
        if not self._engine.has_keywords(collection):
            raise KeywordsUnavailable(
                f"{collection!r} has no keywords yet: a sync adds them to a collection of "
                "the embedded store, a reindex to a server's"
            )

    def keyword_search(
        self,
        collection: str,
        keywords: SparseVector,
        *,
        limit: int,
        filter: SearchFilter | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        self._check_keywords(collection)
        if not keywords.indices:
            return []
        # The sparse index is exact: no graph, so no search parameters.
        query = Nearest(keywords, KEYWORDS_VECTOR)
        where = filters.search_filter(filter)
        return self._engine.query(
            collection, Search(query, limit, filter=where, with_vector=with_vectors)
        )

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
        """The `limit` nearest photos and the `limit` best by keywords, fused by reciprocal
        rank fusion in one query: a photo at rank r (from 1) of a ranking adds
        1 / (rrf_k + r). Best first; photos of equal score by photo id (Qdrant Edge returns
        ties in no fixed order, and the pages of a fused ranking need one). Without words
        to match, the vector ranking alone; KeywordsUnavailable on a collection without
        keyword vectors."""
        where = filters.search_filter(filter)
        rankings = [Prefetch(Nearest(dense(vector), VECTOR_NAME), limit, where, None, self._tuning)]
        if keywords.indices:
            self._check_keywords(collection)
            rankings.append(Prefetch(Nearest(keywords, KEYWORDS_VECTOR), limit, where))
        fused = Search(
            Rrf(k=rrf_k + 1),  # Qdrant's k counts ranks from 0
            limit * len(rankings),
            prefetches=tuple(rankings),
            with_vector=with_vectors,
        )
        return sorted(self._engine.query(collection, fused), key=lambda h: (-h.score, h.photo_id))

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
        if not positive and not negative:
            return []
        examples = Recommend(tuple(dense(v) for v in positive), tuple(dense(v) for v in negative))
        return self._engine.query(
            collection,
            Search(
                examples,
                limit,
                offset,
                filter=filters.search_filter(filter),
                score_threshold=score_threshold,
                tuning=self._tuning,
                with_vector=with_vectors,
            ),
        )

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
        if len(vectors) == 0:
            return []
        where = filters.search_filter(SearchFilter(exclude_ids=tuple(exclude_ids)))
        selected = payload_fields(fields)
        searches = [
            Search(
                Nearest(row.tolist(), VECTOR_NAME),
                limit,
                filter=where,
                score_threshold=score_threshold,
                tuning=self._tuning,
                fields=None if selected is None else tuple(selected),
            )
            for row in np.asarray(vectors, dtype=np.float32)
        ]
        return self._engine.query_batch(collection, searches)
