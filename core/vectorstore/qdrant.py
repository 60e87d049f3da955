"""The store on a Qdrant server or cluster through qdrant-client (or its local mode, in tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from core.settings import QdrantSettings
from core.vectorstore import qdrant_requests as to
from core.vectorstore.base import (
    KEYWORDS_VECTOR,
    VECTOR_NAME,
    CollectionNotFound,
    Hit,
    SearchTuning,
    StoredPhoto,
    StoreError,
    model_version_of,
)
from core.vectorstore.engine import (
    Retrieve,
    Scroll,
    Search,
    Upsert,
    Where,
    Write,
    hit_of,
    stored_of,
    vectors,
)
from core.vectorstore.schema import FieldIndex, schema_of
from core.vectorstore.store import VectorStore


def _is_local(client: QdrantClient) -> bool:
    options = client.init_options
    return options.get("location") == ":memory:" or options.get("path") is not None


def _is_collection(name: str) -> bool:
    """A collection's name, not an alias (whose collection changes)."""
    try:
        model_version_of(name)
    except StoreError:
        return False
    return True


class QdrantEngine:
    """qdrant-client's calls. The server orders concurrent requests itself; local mode is plain
    Python dicts, so there every call is serialized here."""

    def __init__(self, client: QdrantClient, settings: QdrantSettings) -> None:
        self._client = client
        self._settings = settings
        self._schema = schema_of(settings)
        self._local = _is_local(client)
        self._guard: AbstractContextManager[Any] = (
            threading.RLock() if self._local else nullcontext()
        )
        # Whether each collection has the keywords vector: a server cannot add one to a
        # collection, so the answer for a collection's name holds until it is dropped.
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

    def names(self) -> set[str]:
        with self._op():
            return {c.name for c in self._client.get_collections().collections}

    def dim(self, name: str) -> int:
        with self._op(name):
            named = self._client.get_collection(name).config.params.vectors
        if not isinstance(named, Mapping) or VECTOR_NAME not in named:
            raise StoreError(f"collection {name!r} has no {VECTOR_NAME!r} vector")
        return int(named[VECTOR_NAME].size)

    def create(self, name: str, dim: int, *, bulk: bool, indexes: Mapping[str, FieldIndex]) -> int:
        s = self._settings
        self._keywords.pop(name, None)
        with self._op(name):
            if name in self.names():
                return self.dim(name)
            # Local mode has no shards or replicas to place: only a server gets those.
            placement: dict[str, Any] = (
                {} if self._local else {"shard_number": s.shards, "replication_factor": s.replicas}
            )
            config = to.collection_config(dim, self._schema, indexes, bulk=bulk)
            self._client.create_collection(name, **config, **placement)
        self.create_indexes(name, indexes)
        return dim

    def create_indexes(self, collection: str, indexes: Mapping[str, FieldIndex]) -> None:
        if self._local:
            return  # local mode warns that payload indexes do nothing there
        with self._op(collection):
            known = self._client.get_collection(collection).payload_schema or {}
            for field, index in indexes.items():
                if field not in known:
                    self._client.create_payload_index(
                        collection, field, field_schema=to.index_schema(index), wait=True
                    )

    def has_keywords(self, collection: str) -> bool:
        known = self._keywords.get(collection)
        if known is None:
            with self._op(collection):
                info = self._client.get_collection(collection)
            known = KEYWORDS_VECTOR in (info.config.params.sparse_vectors or {})
            if _is_collection(collection):
                self._keywords[collection] = known
        return known

    def add_keywords(self, collection: str, fill: Callable[[], object]) -> bool:
        return False  # a server cannot add a named vector to a collection: a reindex does

    def drop(self, name: str) -> None:
        with self._op(name):
            self._client.delete_collection(name)
            self._keywords.pop(name, None)

    def aliases(self) -> dict[str, str]:
        with self._op():
            found = self._client.get_aliases().aliases
        return {a.alias_name: a.collection_name for a in found}

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        with self._op():
            current = self.aliases()
            ops: list[qm.AliasOperations] = []
            for alias, target in targets.items():
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

    def optimize(self, collection: str) -> None:
        """Nothing to do: the server's optimizers index in the background."""
        with self._op(collection):
            self._client.get_collection(collection)

    def update(self, collection: str, writes: Sequence[Write]) -> None:
        # An upsert in requests of upsert_batch points; the other writes in one request each
        # run of them.
        step = self._settings.upsert_batch
        rest: list[qm.UpdateOperation] = []
        with self._op(collection):
            for w in writes:
                if not isinstance(w, Upsert):
                    rest.append(to.write(w))
                    continue
                self._send(collection, rest)
                for start in range(0, len(w.points), step):
                    batch = [to.point(p) for p in w.points[start : start + step]]
                    self._client.upsert(collection, points=batch, wait=True)
            self._send(collection, rest)

    def _send(self, collection: str, ops: list[qm.UpdateOperation]) -> None:
        if ops:
            self._client.batch_update_points(collection, list(ops), wait=True)
            ops.clear()

    def query(self, collection: str, search: Search) -> list[Hit]:
        request = to.search(search, self._local)
        with self._op(collection):
            found = self._client.query_points(collection, **_arguments(request))
        return [hit_of(p.score, p.payload, p.vector) for p in found.points]

    def query_batch(self, collection: str, searches: Sequence[Search]) -> list[list[Hit]]:
        requests = [to.search(s, self._local) for s in searches]
        with self._op(collection):
            found = self._client.query_batch_points(collection, requests)
        return [[hit_of(p.score, p.payload, p.vector) for p in r.points] for r in found]

    def scroll(self, collection: str, request: Scroll) -> tuple[list[StoredPhoto], object | None]:
        options = to.scroll_options(request)
        with self._op(collection):
            records, offset = self._client.scroll(collection, **options)
        return [stored_of(r.payload, r.vector) for r in records], offset

    def retrieve(self, collection: str, request: Retrieve) -> list[StoredPhoto]:
        with self._op(collection):
            records = self._client.retrieve(
                collection,
                ids=list(request.point_ids),
                with_payload=to.payload(request.fields),
                with_vectors=vectors(request.with_vector),
            )
        return [stored_of(r.payload, r.vector) for r in records]

    def count(self, collection: str) -> int:
        with self._op(collection):
            return self._client.count(collection, exact=True).count

    def facet(
        self, collection: str, field: str, *, limit: int, exact: bool, where: Where | None = None
    ) -> list[tuple[str, int]]:
        with self._op(collection):
            hits = self._client.facet(
                collection, field, facet_filter=to.where(where), limit=limit, exact=exact
            ).hits
        return [(str(hit.value), hit.count) for hit in hits]

    def close(self) -> None:
        with self._guard:
            self._client.close()


def _arguments(request: qm.QueryRequest) -> dict[str, Any]:
    """QdrantClient.query_points's arguments for one query request."""
    return {
        "query": request.query,
        "using": request.using,
        "prefetch": request.prefetch,
        "query_filter": request.filter,
        "limit": request.limit,
        "offset": request.offset,
        "score_threshold": request.score_threshold,
        "search_params": request.params,
        "with_payload": request.with_payload,
        "with_vectors": request.with_vector,
    }


class QdrantStore(VectorStore):
    """The store on qdrant-client (see QdrantEngine)."""

    def __init__(self, client: QdrantClient, *, settings: QdrantSettings) -> None:
        super().__init__(QdrantEngine(client, settings), SearchTuning.of(settings))
