"""The embedded store's reads: searches by embedding, keywords and example; duplicate groups."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager

import numpy as np
import qdrant_edge as qe

from core.embedding.arrays import Embeddings
from core.vectorstore import edge_filters
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
    payload_fields,
    point_id,
)
from core.vectorstore.edge_keywords import sparse


def _vectors(with_vectors: bool) -> list[str] | bool:
    return [VECTOR_NAME] if with_vectors else False


def _hit(point: qe.ScoredPoint) -> Hit:
    payload = point.payload or {}
    return Hit(str(payload.get("photo_id")), point.score, payload, _vector(point.vector))


def _vector(vectors: object) -> Embeddings | None:
    """The embedding among a point's named vectors, if it was read."""
    vector = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
    return None if vector is None else np.asarray(vector, dtype=np.float32)


def _payload(fields: Sequence[str] | None) -> qe.PayloadSelector | bool:
    selected = payload_fields(fields)
    return True if selected is None else qe.PayloadSelector.Include(selected)


def _stored(record: qe.Record) -> StoredPhoto:
    payload = record.payload or {}
    return StoredPhoto(str(payload.get("photo_id")), payload, _vector(record.vector))


def _where(f: SearchFilter | None) -> qe.Filter | None:
    return None if f is None else edge_filters.search_filter(f)


class EdgeSearches:
    """EdgeStore's read side; EdgeStore gives it the shards (each under its read lock), the
    search parameters and which shards have keywords."""

    _tuning: SearchTuning

    def _shard(self, name: str) -> AbstractContextManager[qe.EdgeShard]:
        raise NotImplementedError

    def _has_keywords(self, name: str) -> bool:
        raise NotImplementedError

    def _query(self, collection: str, request: qe.QueryRequest) -> list[Hit]:
        with self._shard(collection) as shard:
            scored = shard.query(request)
        return [_hit(point) for point in scored]

    def _params(self, tuning: SearchTuning | None = None) -> qe.SearchParams:
        return (tuning or self._tuning).params(qe.SearchParams, qe.QuantizationSearchParams)

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
        query = np.asarray(vector, dtype=np.float32).tolist()
        request = qe.QueryRequest(
            limit=limit,
            offset=offset,
            query=qe.Query.Nearest(query, using=VECTOR_NAME),
            filter=_where(filter),
            score_threshold=score_threshold,
            with_payload=True,
            with_vector=_vectors(with_vectors),
            params=self._params(tuning),
        )
        return self._query(collection, request)

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
            raise KeywordsUnavailable(f"{collection!r} has no keywords yet: run a sync")
        if not keywords.indices:
            return []
        # The sparse index is exact: no graph, so no search parameters.
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(sparse(keywords), using=KEYWORDS_VECTOR),
            filter=_where(filter),
            with_payload=True,
            with_vector=_vectors(with_vectors),
        )
        return self._query(collection, request)

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
        examples = qe.RecommendQuery(
            [np.asarray(v, dtype=np.float32).tolist() for v in positive],
            [np.asarray(v, dtype=np.float32).tolist() for v in negative],
        )
        request = qe.QueryRequest(
            limit=limit,
            offset=offset,
            query=qe.Query.RecommendBestScore(examples, using=VECTOR_NAME),
            filter=_where(filter),
            score_threshold=score_threshold,
            with_payload=True,
            with_vector=_vectors(with_vectors),
            params=self._params(),
        )
        return self._query(collection, request)

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
            qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(row.tolist(), using=VECTOR_NAME),
                filter=where,
                score_threshold=score_threshold,
                with_payload=_payload(fields),
                params=self._params(),
            )
            for row in np.asarray(vectors, dtype=np.float32)
        ]
        with self._shard(collection) as shard:
            found = shard.query_batch(qe.QueryBatchRequest(requests))
        return [[_hit(point) for point in points] for points in found]

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
        must: list[qe.ConditionType] = [
            qe.FieldCondition(key=GROUP_FIELD, match=qe.MatchAny(list(dict.fromkeys(groups))))
        ]
        where = _where(filter)
        if where is not None:
            must.append(where)
        members: dict[str, list[str]] = {}
        offset: qe.PointId | None = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=SCROLL_PAGE,
                filter=qe.Filter(must=must),
                with_payload=qe.PayloadSelector.Include(["photo_id", GROUP_FIELD]),
                with_vector=False,
            )
            # One page per lock hold, as the store's other scrolls.
            with self._shard(collection) as shard:
                records, offset = shard.scroll(request)
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
        request = qe.FacetRequest(key=GROUP_FIELD, limit=limit, exact=True)
        with self._shard(collection) as shard:
            hits = shard.facet(request).hits
        sizes = [(str(hit.value), hit.count) for hit in hits if hit.count >= 2]
        return sorted(sizes, key=lambda size: (-size[1], size[0]))

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
        ids: list[qe.PointId] = [point_id(pid) for pid in photo_ids]
        with self._shard(collection) as shard:
            records = shard.retrieve(ids, _payload(fields), _vectors(with_vectors))
        found = {photo.photo_id: photo for photo in map(_stored, records)}
        return [found[pid] for pid in dict.fromkeys(photo_ids) if pid in found]

    def shard_vectors(
        self, collection: str, shard: str, *, fields: Sequence[str] = (), page: int = SCROLL_PAGE
    ) -> Iterator[list[StoredPhoto]]:
        offset: qe.PointId | None = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=page,
                filter=edge_filters.shard_filter(shard),
                with_payload=_payload(fields),
                with_vector=[VECTOR_NAME],
            )
            # One page per lock hold, as the store's other scrolls.
            with self._shard(collection) as edge:
                records, offset = edge.scroll(request)
            if records:
                yield [_stored(record) for record in records]
            if offset is None:
                return
