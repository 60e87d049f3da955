"""The store's writes and reads of points by identity, shard, key and group (see VectorStore)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from core.payload import PhotoPayload
from core.vectorstore import filters
from core.vectorstore.base import (
    GROUP_FIELD,
    MAX_SHARDS,
    POINT_FIELDS,
    SCROLL_PAGE,
    SHARD_FIELD,
    IndexedPoint,
    PhotoPoint,
    SearchFilter,
    StoredPhoto,
    indexed_point,
    payload_fields,
    point_id,
)
from core.vectorstore.engine import (
    DeletePoints,
    Engine,
    HasIds,
    Match,
    NewPoint,
    Retrieve,
    SetPayload,
    Upsert,
    pages,
)
from core.vectorstore.keyword_vectors import dense, keyword_writes, point_vectors


class Points:
    """Writes and reads of stored photos. Every method is blocking."""

    _engine: Engine

    # ---- Writes

    def upsert(self, collection: str, points: Sequence[PhotoPoint]) -> None:
        """Write points (id = point_id(photo_id)), replacing vector and payload; durable."""
        if not points:
            return
        # A collection of an earlier release has no keywords vector to write to.
        keywords = self._engine.has_keywords(collection)
        new = []
        for p in points:
            payload: PhotoPayload = {**p.payload, "photo_id": p.photo_id}
            vectors = point_vectors(dense(p.vector), payload if keywords else {})
            new.append(NewPoint(point_id(p.photo_id), vectors, payload))
        self._engine.update(collection, [Upsert(tuple(new))])

    def set_payload(self, collection: str, photo_id: str, payload: PhotoPayload) -> None:
        """Write a stored photo's payload fields, merged (fields not named, such as GROUP_FIELD,
        are kept), and its keywords vector from the new payload; the embedding is kept."""
        self.set_payloads(collection, {photo_id: payload})

    def set_payloads(self, collection: str, payloads: Mapping[str, PhotoPayload]) -> None:
        """set_payload for many photos (photo id -> payload), in one request."""
        if not payloads:
            return
        written: dict[str, PhotoPayload] = {
            pid: {**payload, "photo_id": pid} for pid, payload in payloads.items()
        }
        # The keywords first: the payload's meta_hash says the photo is up to date. The payload
        # is merged, so fields it does not name (the indexer's group label) are kept.
        writes = keyword_writes(written) if self._engine.has_keywords(collection) else []
        writes += [SetPayload((point_id(pid),), p) for pid, p in written.items()]
        self._engine.update(collection, writes)

    def _label(self, collection: str, label: PhotoPayload, photo_ids: Sequence[str]) -> None:
        if photo_ids:
            ids = tuple(point_id(pid) for pid in photo_ids)
            self._engine.update(collection, [SetPayload(ids, label)])

    def set_shard(self, collection: str, shard: str, photo_ids: Sequence[str]) -> None:
        """Label photos with a shard, keeping the rest of their payload."""
        self._label(collection, {SHARD_FIELD: shard}, photo_ids)

    def set_group(self, collection: str, group: str, photo_ids: Sequence[str]) -> None:
        """Put photos in a near-duplicate group (GROUP_FIELD), keeping the rest of their
        payload."""
        self._label(collection, {GROUP_FIELD: group}, photo_ids)

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        """Delete photos by identity; unknown ids are ignored."""
        if photo_ids:
            ids = tuple(point_id(pid) for pid in photo_ids)
            self._engine.update(collection, [DeletePoints(point_ids=ids)])

    def delete_in_shard(self, collection: str, shard: str | None, photo_ids: Sequence[str]) -> None:
        """Delete photos by identity only while they still carry this shard label (None: no
        label): a photo that moved to another shard meanwhile is left to that shard."""
        if photo_ids:
            where = filters.in_shard(shard, photo_ids)
            self._engine.update(collection, [DeletePoints(where=where)])

    # ---- Reads

    def count(self, collection: str) -> int:
        """Exact number of points."""
        return self._engine.count(collection)

    def shard_sizes(self, collection: str) -> dict[str, int]:
        """Each shard label of the collection and its exact number of points."""
        return dict(self._engine.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=True))

    def shard_labels(self, collection: str) -> list[str]:
        """The shard labels that have points, read off the payload index (no point is
        counted: its cost is the number of shards, not of points)."""
        # Not exact: the payload index's own counts, at the cost of the shards and not of the
        # points (an exact facet reads every point: 150 ms at 1e6 on Edge); a label with no
        # point left is not among them.
        found = self._engine.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=False)
        return [label for label, count in found if count]

    def value_counts(self, collection: str, field: str, *, limit: int) -> list[tuple[str, int]]:
        """The `limit` values of an indexed keyword field held by the most photos, with how
        many hold each (each item of a list field), most first: the payload index's own
        counts, whose cost is the number of distinct values, never of the photos."""
        if limit <= 0:
            return []
        return self._engine.facet(collection, field, limit=limit, exact=False)

    def facet_counts(
        self,
        collection: str,
        field: str,
        *,
        filter: SearchFilter | None = None,
        photo_ids: Sequence[str] | None = None,
        limit: int,
    ) -> list[tuple[str, int]]:
        """The `limit` most held values of a payload field (each item of a list field) among
        the photos that match the filter and, when given, are among photo_ids, with the exact
        number of those photos that hold each: most first."""
        where = filters.search_filter(filter)
        if photo_ids is not None:
            if not photo_ids:
                return []
            ids = HasIds(frozenset(point_id(pid) for pid in photo_ids))
            where = filters.both(ids, where)
        # Exact: the engine reads the matching points' values, not its index's estimate.
        return self._engine.facet(collection, field, limit=limit, exact=True, where=where)

    def points(
        self, collection: str, *, shard: str | None = None, unlabelled: bool = False
    ) -> Iterator[IndexedPoint]:
        """Stored photos' identities and versions, paged, without vectors: those of one shard,
        those without a shard label (unlabelled), or all (small collections and tests)."""
        where = filters.shard_filter(shard, unlabelled=unlabelled)
        for page in pages(self._engine, collection, where, fields=tuple(POINT_FIELDS)):
            yield from (indexed_point(p.payload) for p in page)

    def points_by_id(self, collection: str, photo_ids: Sequence[str]) -> list[IndexedPoint]:
        """The stored photos among these identities (no vectors); missing ones left out."""
        if not photo_ids:
            return []
        ids = tuple(point_id(pid) for pid in photo_ids)
        found = self._engine.retrieve(collection, Retrieve(ids, tuple(POINT_FIELDS)))
        return [indexed_point(p.payload) for p in found]

    def points_by_key(self, collection: str, keys: Sequence[str]) -> list[IndexedPoint]:
        """The stored photos whose source key is among these."""
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
        """Stored photos by identity, in the order asked; missing ones are left out. fields:
        the payload fields read besides photo_id (None: the whole payload)."""
        if not photo_ids:
            return []
        ids = tuple(point_id(pid) for pid in photo_ids)
        selected = payload_fields(fields)
        request = Retrieve(ids, None if selected is None else tuple(selected), with_vectors)
        found = {photo.photo_id: photo for photo in self._engine.retrieve(collection, request)}
        return [found[pid] for pid in dict.fromkeys(photo_ids) if pid in found]

    def shard_vectors(
        self, collection: str, shard: str, *, fields: Sequence[str] = (), page: int = SCROLL_PAGE
    ) -> Iterator[list[StoredPhoto]]:
        """One shard's photos with their embeddings and only these payload fields (and
        photo_id), `page` at a time: a whole-collection pass reads no more than it uses."""
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
        """The photo ids of each near-duplicate group (GROUP_FIELD) that match the filter, at
        most limit_each a group, in photo id order; groups without any are left out."""
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
        """The largest near-duplicate groups of two or more photos: (group, size), largest
        first, then by group."""
        if limit <= 0:
            return []
        # The facet counts the largest groups first: `limit` of them hold the largest of two
        # or more, unless fewer than `limit` have two.
        found = self._engine.facet(collection, GROUP_FIELD, limit=limit, exact=True)
        sizes = [(group, count) for group, count in found if count >= 2]
        return sorted(sizes, key=lambda size: (-size[1], size[0]))
