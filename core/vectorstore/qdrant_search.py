"""The server store's searches: by embedding, by keywords, by example, and duplicate groups."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.conversions.common_types import PointId

from core.embedding.arrays import Embeddings
from core.vectorstore import qdrant_filters
from core.vectorstore.base import (
    GROUP_FIELD,
    KEYWORDS_VECTOR,
    SCROLL_PAGE,
    VECTOR_NAME,
    Hit,
    KeywordsUnavailable,
    SearchFilter,
    SearchTuning,
    SparseVector,
    StoredPhoto,
    StoreError,
    model_version_of,
    payload_fields,
)
from core.vectorstore.qdrant_keywords import sparse


def _vectors(with_vectors: bool) -> list[str] | bool:
    return [VECTOR_NAME] if with_vectors else False


def _hit(point: qm.ScoredPoint) -> Hit:
    found = dict(point.payload or {})
    return Hit(str(found.get("photo_id")), point.score, found, _vector(point.vector))


def _vector(vectors: object) -> Embeddings | None:
    """The embedding among a point's named vectors, if it was read."""
    vector = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
    return None if vector is None else np.asarray(vector, dtype=np.float32)


def payload(fields: Sequence[str] | None) -> qm.PayloadSelectorInclude | bool:
    selected = payload_fields(fields)
    return True if selected is None else qm.PayloadSelectorInclude(include=selected)


def stored(record: qm.Record) -> StoredPhoto:
    found = dict(record.payload or {})
    return StoredPhoto(str(found.get("photo_id")), found, _vector(record.vector))


def _where(f: SearchFilter | None) -> qm.Filter | None:
    return None if f is None else qdrant_filters.search_filter(f)


def _is_collection(name: str) -> bool:
    """A collection's name, not an alias (whose collection changes)."""
    try:
        model_version_of(name)
    except StoreError:
        return False
    return True


class QdrantSearches:
    """QdrantStore's read side; QdrantStore gives it the client, its error mapping, and the
    search parameters."""

    _client: QdrantClient
    _local: bool
    _tuning: SearchTuning
    # Whether each collection has the keywords vector: a server cannot add one to a
    # collection, so the answer for a collection's name holds until it is dropped.
    _keywords: dict[str, bool]

    def _op(self, name: str | None = None) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _has_keywords(self, collection: str) -> bool:
        known = self._keywords.get(collection)
        if known is None:
            with self._op(collection):
                info = self._client.get_collection(collection)
            known = KEYWORDS_VECTOR in (info.config.params.sparse_vectors or {})
            if _is_collection(collection):
                self._keywords[collection] = known
        return known

    def _params(self, tuning: SearchTuning | None = None) -> qm.SearchParams | None:
        if self._local:  # local mode is exact and warns about search params
            return None
        return (tuning or self._tuning).params(qm.SearchParams, qm.QuantizationSearchParams)

    def _query(self, collection: str, **request: Any) -> list[Hit]:
        with self._op(collection):
            response = self._client.query_points(collection, with_payload=True, **request)
        return [_hit(point) for point in response.points]

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
        return self._query(
            collection,
            query=np.asarray(vector, dtype=np.float32).tolist(),
            using=VECTOR_NAME,
            limit=limit,
            offset=offset,
            query_filter=_where(filter),
            score_threshold=score_threshold,
            search_params=self._params(tuning),
            with_vectors=_vectors(with_vectors),
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
        if not self._has_keywords(collection):
            raise KeywordsUnavailable(f"{collection!r} was built without keywords: reindex")
        if not keywords.indices:
            return []
        # The sparse index is exact: no graph, so no search parameters.
        return self._query(
            collection,
            query=sparse(keywords),
            using=KEYWORDS_VECTOR,
            limit=limit,
            query_filter=_where(filter),
            with_vectors=_vectors(with_vectors),
        )

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
        examples = qm.RecommendInput(
            positive=[np.asarray(v, dtype=np.float32).tolist() for v in positive],
            negative=[np.asarray(v, dtype=np.float32).tolist() for v in negative],
            strategy=qm.RecommendStrategy.BEST_SCORE,
        )
        return self._query(
            collection,
            query=qm.RecommendQuery(recommend=examples),
            using=VECTOR_NAME,
            limit=limit,
            offset=offset,
            query_filter=_where(filter),
            score_threshold=score_threshold,
            search_params=self._params(),
            with_vectors=_vectors(with_vectors),
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
        where = _where(SearchFilter(exclude_ids=tuple(exclude_ids)))
        requests = [
            qm.QueryRequest(
                query=row.tolist(),
                using=VECTOR_NAME,
                limit=limit,
                filter=where,
                score_threshold=score_threshold,
                params=self._params(),
                with_payload=payload(fields),
            )
            for row in np.asarray(vectors, dtype=np.float32)
        ]
        with self._op(collection):
            found = self._client.query_batch_points(collection, requests)
        return [[_hit(point) for point in response.points] for response in found]

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
        must: list[qm.Condition] = [
            qm.FieldCondition(key=GROUP_FIELD, match=qm.MatchAny(any=list(dict.fromkeys(groups))))
        ]
        where = _where(filter)
        if where is not None:
            must.append(where)
        members: dict[str, list[str]] = {}
        offset: PointId | None = None
        while True:
            with self._op(collection):
                records, offset = self._client.scroll(
                    collection,
                    scroll_filter=qm.Filter(must=must),
                    limit=SCROLL_PAGE,
                    offset=offset,
                    with_payload=qm.PayloadSelectorInclude(include=["photo_id", GROUP_FIELD]),
                    with_vectors=False,
                )
            for record in records:
                payload = record.payload or {}
                members.setdefault(str(payload[GROUP_FIELD]), []).append(str(payload["photo_id"]))
            if offset is None:
                break
        # Point ids are not in photo id order: the whole group is read to take its first ones.
        return {group: sorted(ids)[:limit_each] for group, ids in sorted(members.items())}

    def group_sizes(self, collection: str, *, limit: int) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        # The facet counts the largest groups first: `limit` of them hold the largest of two
        # or more, unless fewer than `limit` have two.
        with self._op(collection):
            hits = self._client.facet(collection, GROUP_FIELD, limit=limit, exact=True).hits
        sizes = [(str(hit.value), hit.count) for hit in hits if hit.count >= 2]
        return sorted(sizes, key=lambda size: (-size[1], size[0]))

    def shard_vectors(
        self, collection: str, shard: str, *, fields: Sequence[str] = (), page: int = SCROLL_PAGE
    ) -> Iterator[list[StoredPhoto]]:
        offset: PointId | None = None
        while True:
            with self._op(collection):
                records, offset = self._client.scroll(
                    collection,
                    scroll_filter=qdrant_filters.shard_filter(shard),
                    limit=page,
                    offset=offset,
                    with_payload=payload(fields),
                    with_vectors=[VECTOR_NAME],
                )
            if records:
                yield [stored(record) for record in records]
            if offset is None:
                return
