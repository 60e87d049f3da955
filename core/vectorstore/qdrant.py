"""The store on a Qdrant server or cluster through qdrant-client (or its local mode, in tests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.conversions.common_types import PointId
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from core.settings import QdrantSettings
from core.vectorstore import qdrant_filters
from core.vectorstore.base import (
    DATETIME_FIELDS,
    GROUP_FIELD,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    MAX_SHARDS,
    POINT_FIELDS,
    SCROLL_PAGE,
    SHARD_FIELD,
    VECTOR_NAME,
    CollectionInfo,
    CollectionNotFound,
    IndexedPoint,
    PhotoPoint,
    SearchTuning,
    StoredPhoto,
    StoreError,
    indexed_point,
    model_version_of,
    point_id,
)
from core.vectorstore.qdrant_keywords import SPARSE_CONFIG, keyword_updates, point_vectors
from core.vectorstore.qdrant_search import QdrantSearches, payload, stored


def _is_local(client: QdrantClient) -> bool:
    options = client.init_options
    return options.get("location") == ":memory:" or options.get("path") is not None


class QdrantStore(QdrantSearches):
    """A VectorStore on qdrant-client. The server orders concurrent requests itself; local mode
    is plain Python dicts, so there every call is serialized here."""

    def __init__(self, client: QdrantClient, *, settings: QdrantSettings) -> None:
        self._client = client
        self._settings = settings
        self._tuning = SearchTuning.of(settings)
        self._local = _is_local(client)
        self._guard: AbstractContextManager[Any] = (
            threading.RLock() if self._local else nullcontext()
        )
        self._keywords: dict[str, bool] = {}

    @contextmanager
    def _op(self, name: str | None = None) -> Iterator[None]:
        with self._guard:
            try:
                yield
            except UnexpectedResponse as e:
                if e.status_code == 404 and name is not None:
                    raise CollectionNotFound(name) from e
                raise StoreError(str(e)) from e
            except ResponseHandlingException as e:
                raise StoreError(str(e)) from e
            except (ValueError, RuntimeError) as e:  # how local mode reports what the server would
                if "not found" in str(e) and name is not None:
                    raise CollectionNotFound(name) from e
                raise StoreError(str(e)) from e

    def _collection_names(self) -> set[str]:
        with self._op():
            return {c.name for c in self._client.get_collections().collections}

    def create_collection(self, name: str, dim: int, *, bulk: bool = False) -> None:
        model_version_of(name)
        s = self._settings
        self._keywords.pop(name, None)
        with self._op(name):
            if name in self._collection_names():
                size = self._dim(name)
                if size != dim:
                    raise StoreError(f"collection {name!r} has dim {size}, not {dim}")
                return
            quantization = (
                qm.ScalarQuantization(
                    scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, always_ram=True)
                )
                if s.quantization
                else None
            )
            # Local mode has no shards or replicas to place: only a server gets those.
            placement: dict[str, Any] = (
                {} if self._local else {"shard_number": s.shards, "replication_factor": s.replicas}
            )
            self._client.create_collection(
                name,
                vectors_config={
                    VECTOR_NAME: qm.VectorParams(
                        size=dim, distance=qm.Distance.COSINE, on_disk=s.on_disk
                    )
                },
                sparse_vectors_config=SPARSE_CONFIG,
                # m=0 defers the HNSW graphs of a bulk load: built once by finish_bulk_load,
                # not rebuilt segment after segment while 1e8 points arrive (Qdrant's advice).
                hnsw_config=qm.HnswConfigDiff(
                    m=0 if bulk else s.hnsw_m, ef_construct=s.hnsw_ef_construct
                ),
                quantization_config=quantization,
                on_disk_payload=True,
                **placement,
            )
        self.ensure_indexes(name)

    def ensure_indexes(self, collection: str) -> None:
        if self._local:
            return  # local mode warns that payload indexes do nothing there
        schema = dict.fromkeys(KEYWORD_FIELDS, qm.PayloadSchemaType.KEYWORD)
        schema |= dict.fromkeys(DATETIME_FIELDS, qm.PayloadSchemaType.DATETIME)
        schema |= dict.fromkeys(INTEGER_FIELDS, qm.PayloadSchemaType.INTEGER)
        with self._op(collection):
            known = self._client.get_collection(collection).payload_schema or {}
            for field, kind in schema.items():
                if field not in known:
                    self._client.create_payload_index(
                        collection, field, field_schema=kind, wait=True
                    )

    def finish_bulk_load(self, collection: str) -> None:
        with self._op(collection):
            self._client.update_collection(
                collection, hnsw_config=qm.HnswConfigDiff(m=self._settings.hnsw_m)
            )

    def index_ready(self, collection: str) -> bool:
        """Green: the server's optimizers (the HNSW build among them) have nothing left to do."""
        with self._op(collection):
            status = self._client.get_collection(collection).status
            if status == qm.CollectionStatus.GREY:
                # Optimizations pending but not started (a restarted server waits for an update
                # to trigger them): an empty update of the optimizer config does.
                self._client.update_collection(
                    collection, optimizers_config=qm.OptimizersConfigDiff()
                )
        return status == qm.CollectionStatus.GREEN

    def _dim(self, name: str) -> int:
        with self._op(name):
            vectors = self._client.get_collection(name).config.params.vectors
        if not isinstance(vectors, Mapping) or VECTOR_NAME not in vectors:
            raise StoreError(f"collection {name!r} has no {VECTOR_NAME!r} vector")
        return int(vectors[VECTOR_NAME].size)

    def has_collection(self, name: str) -> bool:
        # Not collection_exists(): that also answers True for an alias.
        return name in self._collection_names()

    def drop_collection(self, name: str) -> None:
        with self._op(name):
            if name not in self._collection_names():
                raise CollectionNotFound(name)
            aliased = sorted(a for a, target in self.aliases().items() if target == name)
            if aliased:
                raise StoreError(f"collection {name!r} is aliased by {', '.join(aliased)}")
            self._client.delete_collection(name)
            self._keywords.pop(name, None)

    def collections(self) -> list[CollectionInfo]:
        versions: dict[str, int] = {}
        for name in self._collection_names():
            try:
                versions[name] = model_version_of(name)
            except StoreError:
                continue  # a shared server holds other applications' collections too
        aliases = self.aliases()
        infos = []
        for name in sorted(versions, key=lambda n: (versions[n], n)):
            infos.append(
                CollectionInfo(
                    name=name,
                    model_version=versions[name],
                    dim=self._dim(name),
                    points=self.count(name),
                    aliases=tuple(sorted(a for a, t in aliases.items() if t == name)),
                )
            )
        return infos

    def aliases(self) -> dict[str, str]:
        with self._op():
            found = self._client.get_aliases().aliases
        return {a.alias_name: a.collection_name for a in found}

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        with self._op():
            current = self.aliases()
            names = self._collection_names()
            ops: list[qm.AliasOperations] = []
            for alias, target in targets.items():
                if alias in names:
                    raise StoreError(f"{alias!r} is a collection, not an alias")
                if target is not None and target not in names:
                    raise CollectionNotFound(target)
                if alias in current:
                    ops.append(
                        qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias))
                    )
                if target is not None:
                    create = qm.CreateAlias(collection_name=target, alias_name=alias)
                    ops.append(qm.CreateAliasOperation(create_alias=create))
            if ops:
                # One request: the server applies the whole list atomically.
                self._client.update_collection_aliases(change_aliases_operations=ops)

    def resolve(self, name: str) -> str:
        target = self.aliases().get(name)
        if target is not None:
            return target
        if name in self._collection_names():
            return name
        raise CollectionNotFound(name)

    def upsert(self, collection: str, points: Sequence[PhotoPoint]) -> None:
        if not points:
            return
        # A collection of an earlier release has no keywords vector to write to.
        keywords = self._has_keywords(collection)
        step = self._settings.upsert_batch
        for start in range(0, len(points), step):
            batch = []
            for p in points[start : start + step]:
                payload = {**p.payload, "photo_id": p.photo_id}
                embedding = np.asarray(p.vector, dtype=np.float32).tolist()
                vectors = point_vectors(embedding, payload if keywords else {})
                batch.append(
                    qm.PointStruct(id=point_id(p.photo_id), vector=vectors, payload=payload)
                )
            with self._op(collection):
                self._client.upsert(collection, points=batch, wait=True)

    def set_payload(self, collection: str, photo_id: str, payload: dict[str, Any]) -> None:
        self.set_payloads(collection, {photo_id: payload})

    def set_payloads(self, collection: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        if not payloads:
            return
        written = {pid: {**payload, "photo_id": pid} for pid, payload in payloads.items()}
        # The keywords first: the payload's meta_hash says the photo is up to date. The payload
        # is merged, so fields it does not name (the indexer's group label) are kept.
        ops = keyword_updates(written) if self._has_keywords(collection) else []
        ops += [
            qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=p, points=[point_id(pid)]))
            for pid, p in written.items()
        ]
        with self._op(collection):
            self._client.batch_update_points(collection, ops, wait=True)

    def set_shard(self, collection: str, shard: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        with self._op(collection):
            self._client.set_payload(
                collection,
                payload={SHARD_FIELD: shard},
                points=[point_id(pid) for pid in photo_ids],
                wait=True,
            )

    def set_group(self, collection: str, group: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        with self._op(collection):
            self._client.set_payload(
                collection,
                payload={GROUP_FIELD: group},
                points=[point_id(pid) for pid in photo_ids],
                wait=True,
            )

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        selector = qm.PointIdsList(points=[point_id(pid) for pid in photo_ids])
        with self._op(collection):
            self._client.delete(collection, points_selector=selector, wait=True)

    def delete_in_shard(self, collection: str, shard: str | None, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        selector = qm.FilterSelector(filter=qdrant_filters.in_shard(shard, photo_ids))
        with self._op(collection):
            self._client.delete(collection, points_selector=selector, wait=True)

    def count(self, collection: str) -> int:
        with self._op(collection):
            return self._client.count(collection, exact=True).count

    def shard_sizes(self, collection: str) -> dict[str, int]:
        with self._op(collection):
            hits = self._client.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=True).hits
        return {str(hit.value): hit.count for hit in hits}

    def shard_labels(self, collection: str) -> list[str]:
        # Not exact: the server answers from its payload index, at the cost of the shards.
        with self._op(collection):
            hits = self._client.facet(collection, SHARD_FIELD, limit=MAX_SHARDS, exact=False).hits
        return [str(hit.value) for hit in hits if hit.count]

    def points(
        self, collection: str, *, shard: str | None = None, unlabelled: bool = False
    ) -> Iterator[IndexedPoint]:
        return self._scroll(collection, qdrant_filters.shard_filter(shard, unlabelled=unlabelled))

    def _scroll(self, collection: str, where: qm.Filter | None) -> Iterator[IndexedPoint]:
        offset: PointId | None = None
        while True:
            with self._op(collection):
                records, offset = self._client.scroll(
                    collection,
                    scroll_filter=where,
                    limit=SCROLL_PAGE,
                    offset=offset,
                    with_payload=qm.PayloadSelectorInclude(include=POINT_FIELDS),
                    with_vectors=False,
                )
            yield from (indexed_point(record.payload) for record in records)
            if offset is None:
                return

    def points_by_id(self, collection: str, photo_ids: Sequence[str]) -> list[IndexedPoint]:
        fields = qm.PayloadSelectorInclude(include=POINT_FIELDS)
        records = self._records(collection, photo_ids, fields, with_vectors=False)
        return [indexed_point(record.payload) for record in records]

    def _records(
        self,
        collection: str,
        photo_ids: Sequence[str],
        payload: bool | qm.PayloadSelectorInclude,
        *,
        with_vectors: bool,
    ) -> list[qm.Record]:
        if not photo_ids:
            return []
        with self._op(collection):
            return self._client.retrieve(
                collection,
                ids=[point_id(pid) for pid in photo_ids],
                with_payload=payload,
                with_vectors=[VECTOR_NAME] if with_vectors else False,
            )

    def points_by_key(self, collection: str, keys: Sequence[str]) -> list[IndexedPoint]:
        if not keys:
            return []
        return list(self._scroll(collection, qdrant_filters.with_keys(keys)))

    def retrieve(
        self,
        collection: str,
        photo_ids: Sequence[str],
        *,
        with_vectors: bool = False,
        fields: Sequence[str] | None = None,
    ) -> list[StoredPhoto]:
        records = self._records(collection, photo_ids, payload(fields), with_vectors=with_vectors)
        found = {photo.photo_id: photo for photo in map(stored, records)}
        return [found[pid] for pid in dict.fromkeys(photo_ids) if pid in found]

    def optimize(self, collection: str) -> None:
        """Nothing to do: the server's optimizers index in the background."""
        self.resolve(collection)

    def close(self) -> None:
        with self._guard:
            self._client.close()
