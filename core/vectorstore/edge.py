"""The embedded store: one Qdrant Edge shard per collection in a local folder, aliases in JSON."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import qdrant_edge as qe

from core.atomicfile import write_atomic
from core.vectorstore import edge_requests as to
from core.vectorstore.base import (
    KEYWORDS_VECTOR,
    CollectionNotFound,
    Hit,
    SearchTuning,
    StoredPhoto,
    StoreError,
)
from core.vectorstore.diskspace import MB, DiskReserve, folder_bytes
from core.vectorstore.edge_shard import (
    OpenShard,
    create_indexes,
    engine_errors,
    missing_indexes,
    shard_config,
)
from core.vectorstore.engine import (
    DeletePoints,
    DeleteVectors,
    Retrieve,
    Scroll,
    Search,
    SetPayload,
    SetVectors,
    Upsert,
    Where,
    Write,
    hit_of,
    stored_of,
    vectors,
)
from core.vectorstore.rwlock import RWLock
from core.vectorstore.schema import CollectionSchema, FieldIndex
from core.vectorstore.store import VectorStore

# What a write is called when the disk has no room for it.
_WRITES = {
    Upsert: "upsert",
    SetPayload: "payload update",
    SetVectors: "payload update",
    DeleteVectors: "payload update",
    DeletePoints: "delete",  # it too appends to the write-ahead log
}


def _write_json_atomic(path: Path, data: object) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True), durable=True)


class EdgeEngine:
    """Qdrant Edge in-process. One process owns `path`: shards are not shared between processes.

    Edge calls hold the GIL while they run (optimize() included), so they serialize with other
    Python threads; the locks here are for correctness around close and drop, not parallelism.
    Writes go through each shard's write-ahead log, which survives the process being killed.
    """

    def __init__(self, path: Path, *, schema: CollectionSchema, min_free_mb: int = 0) -> None:
        """schema: how a new collection is made; one made before keeps its own."""
        self._shards_dir = path / "collections"
        self._aliases_path = path / "aliases.json"
        self._schema = schema
        # Guards the registry and the aliases; never held while a shard call runs.
        self._mutex = threading.Lock()
        self._closed = False
        self._shards_dir.mkdir(parents=True, exist_ok=True)
        self._room = DiskReserve(path, min_free_mb * MB)
        self._aliases: dict[str, str] = {}
        if self._aliases_path.exists():
            self._aliases = dict(json.loads(self._aliases_path.read_text(encoding="utf-8")))
        self._collections: dict[str, OpenShard] = {}
        try:
            for meta in sorted(self._shards_dir.glob("*.json")):
                shard_dir = self._shards_dir / meta.stem
                if shard_dir.is_dir():
                    about = json.loads(meta.read_text(encoding="utf-8"))
                    with engine_errors():
                        shard = qe.EdgeShard.load(str(shard_dir))
                    self._collections[meta.stem] = OpenShard(
                        shard, int(about["dim"]), RWLock(), keywords=bool(about.get("keywords"))
                    )
        except BaseException:
            self.close()  # release the shards already opened: their folders stay locked
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    def _open(self, name: str) -> OpenShard:
        with self._mutex:
            self._check_open()
            coll = self._collections.get(self._aliases.get(name, name))
            if coll is None or coll.dropping:
                raise CollectionNotFound(name)
            return coll

    @contextmanager
    def _shard(self, name: str) -> Iterator[qe.EdgeShard]:
        coll = self._open(name)
        with coll.lock.read(), engine_errors():
            if coll.shard is None:  # dropped or closed while we waited
                raise CollectionNotFound(name)
            yield coll.shard

    def _write_meta(self, name: str, coll: OpenShard) -> None:
        meta = {"dim": coll.dim, "keywords": coll.keywords}
        _write_json_atomic(self._shards_dir / f"{name}.json", meta)

    def names(self) -> set[str]:
        with self._mutex:
            self._check_open()
            return {name for name, c in self._collections.items() if not c.dropping}

    def dim(self, name: str) -> int:
        return self._open(name).dim

    def create(self, name: str, dim: int, *, bulk: bool, indexes: Mapping[str, FieldIndex]) -> int:
        # The engine builds no index while it is written to (optimize() does): nothing to defer.
        with self._mutex:
            self._check_open()
            existing = self._collections.get(name)
            if existing is not None:
                if existing.dropping:
                    raise StoreError(f"collection {name!r} is being dropped")
                return existing.dim
            self._room.check("new collection")
            shard_dir = self._shards_dir / name
            # A folder without its metadata file is a create that crashed half-way: empty.
            shutil.rmtree(shard_dir, ignore_errors=True)
            with engine_errors():
                shard = qe.EdgeShard.create(
                    str(shard_dir), shard_config(dim, self._schema, indexes)
                )
                try:
                    create_indexes(shard, missing_indexes(shard, indexes))
                    shard.flush()
                except BaseException:
                    shard.close()  # else it keeps the folder locked
                    raise
            coll = OpenShard(shard, dim, RWLock(), keywords=True)
            self._write_meta(name, coll)
            self._collections[name] = coll
            return dim

    def create_indexes(self, collection: str, indexes: Mapping[str, FieldIndex]) -> None:
        with self._shard(collection) as shard:
            missing = missing_indexes(shard, indexes)
            if missing:  # a collection of an earlier release: a write, which needs room
                self._room.check("payload index")
                create_indexes(shard, missing)

    def has_keywords(self, collection: str) -> bool:
        # Without the keywords vector (a shard of an earlier release), until ensure_indexes.
        return self._open(collection).keywords

    def add_keywords(self, collection: str, fill: Callable[[], object]) -> bool:
        coll = self._open(collection)
        self._room.check("keywords")
        with self._shard(collection) as shard:
            # Kept as it is where it exists: a fill that crashed half-way goes on.
            shard.update(qe.UpdateOperation.create_sparse_vector(KEYWORDS_VECTOR, qe.Modifier.Idf))
        fill()
        with self._shard(collection) as shard:
            shard.flush()  # before the metadata file says it is done
        coll.keywords = True
        self._write_meta(self._resolve(collection), coll)
        return True

    def _resolve(self, name: str) -> str:
        with self._mutex:
            return self._aliases.get(name, name)

    def drop(self, name: str) -> None:
        with self._mutex:
            self._check_open()
            coll = self._collections.get(name)
            if coll is None or coll.dropping:
                raise CollectionNotFound(name)
            coll.dropping = True  # new calls now see it gone
        try:
            # Waits for the calls already running on this shard.
            with coll.lock.write(), engine_errors():
                if coll.shard is not None:
                    coll.shard.close()
                    coll.shard = None
            (self._shards_dir / f"{name}.json").unlink(missing_ok=True)
            shutil.rmtree(self._shards_dir / name, ignore_errors=True)
        finally:
            with self._mutex:
                if coll.shard is None:
                    self._collections.pop(name, None)
                else:
                    coll.dropping = False

    def aliases(self) -> dict[str, str]:
        with self._mutex:
            self._check_open()
            return dict(self._aliases)

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        with self._mutex:
            self._check_open()
            updated = dict(self._aliases)
            for alias, target in targets.items():
                if target is None:
                    updated.pop(alias, None)
                else:
                    updated[alias] = target
            _write_json_atomic(self._aliases_path, updated)
            self._aliases = updated

    def finish_bulk_load(self, collection: str) -> None:
        self.optimize(collection)

    def index_ready(self, collection: str) -> bool:
        self._open(collection)
        return True  # optimize() blocks until the index is built

    def optimize(self, collection: str) -> None:
        # It writes new segments beside the old ones before it drops them: up to their size.
        folder = self._shards_dir / self._resolve(collection)
        self._room.check("optimize", folder_bytes(folder))
        with self._shard(collection) as shard:
            shard.optimize()

    def update(self, collection: str, writes: Sequence[Write]) -> None:
        if not writes:
            return
        ops = [to.write(w) for w in writes]
        self._room.check(_WRITES[type(writes[0])])
        with self._shard(collection) as shard:
            # The WAL makes each survive a killed process without a flush (tested).
            for op in ops:
                shard.update(op)

    def query(self, collection: str, search: Search) -> list[Hit]:
        request = to.search(search)
        with self._shard(collection) as shard:
            found = shard.query(request)
        return [hit_of(p.score, p.payload, p.vector) for p in found]

    def query_batch(self, collection: str, searches: Sequence[Search]) -> list[list[Hit]]:
        requests = [to.search(s) for s in searches]
        with self._shard(collection) as shard:
            found = shard.query_batch(qe.QueryBatchRequest(requests))
        return [[hit_of(p.score, p.payload, p.vector) for p in points] for points in found]

    def scroll(self, collection: str, request: Scroll) -> tuple[list[StoredPhoto], object | None]:
        scroll = to.scroll(request)
        with self._shard(collection) as shard:
            records, offset = shard.scroll(scroll)
        return [stored_of(r.payload, r.vector) for r in records], offset

    def retrieve(self, collection: str, request: Retrieve) -> list[StoredPhoto]:
        ids: list[qe.PointId] = list(request.point_ids)
        with self._shard(collection) as shard:
            records = shard.retrieve(ids, to.payload(request.fields), vectors(request.with_vector))
        return [stored_of(r.payload, r.vector) for r in records]

    def count(self, collection: str) -> int:
        with self._shard(collection) as shard:
            return shard.count(qe.CountRequest(exact=True))

    def facet(
        self, collection: str, field: str, *, limit: int, exact: bool, where: Where | None = None
    ) -> list[tuple[str, int]]:
        request = qe.FacetRequest(key=field, limit=limit, exact=exact, filter=to.where(where))
        with self._shard(collection) as shard:
            hits = shard.facet(request).hits
        return [(str(hit.value), hit.count) for hit in hits]

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            colls = list(self._collections.values())
        errors: list[Exception] = []
        for coll in colls:
            with coll.lock.write():
                shard, coll.shard = coll.shard, None
                try:
                    if shard is not None:
                        shard.flush()
                        shard.close()
                except Exception as e:  # close the others all the same
                    errors.append(e)
        if errors:
            raise StoreError(str(errors[0])) from errors[0]


class EdgeStore(VectorStore):
    """The store on Qdrant Edge in `path` (see EdgeEngine)."""

    def __init__(
        self,
        path: Path,
        *,
        schema: CollectionSchema,
        tuning: SearchTuning,
        min_free_mb: int = 0,
    ) -> None:
        super().__init__(EdgeEngine(path, schema=schema, min_free_mb=min_free_mb), tuning)
