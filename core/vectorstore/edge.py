"""The embedded store: one Qdrant Edge shard per collection in a local folder, aliases in JSON."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from core.atomicfile import write_atomic
from core.vectorstore import edge_filters
from core.vectorstore.base import (
    GROUP_FIELD,
    MAX_SHARDS,
    POINT_FIELDS,
    SCROLL_PAGE,
    SHARD_FIELD,
    CollectionInfo,
    CollectionNotFound,
    IndexedPoint,
    PhotoPoint,
    SearchTuning,
    StoreError,
    indexed_point,
    model_version_of,
    point_id,
)
from core.vectorstore.diskspace import MB, DiskReserve, folder_bytes
from core.vectorstore.edge_keywords import add_keywords, keyword_updates, point_vectors
from core.vectorstore.edge_search import EdgeSearches
from core.vectorstore.edge_shard import (
    OpenShard,
    create_indexes,
    engine_errors,
    missing_indexes,
    shard_config,
)
from core.vectorstore.rwlock import RWLock


def _write_json_atomic(path: Path, data: object) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True), durable=True)


class EdgeStore(EdgeSearches):
    """Qdrant Edge in-process. One process owns `path`: shards are not shared between processes.

    Edge calls hold the GIL while they run (optimize() included), so they serialize with other
    Python threads; the locks here are for correctness around close and drop, not parallelism.
    Writes go through each shard's write-ahead log, which survives the process being killed.
    """

    def __init__(
        self,
        path: Path,
        *,
        hnsw_m: int,
        hnsw_ef_construct: int,
        quantization: bool,
        tuning: SearchTuning,
        min_free_mb: int = 0,
    ) -> None:
        self._shards_dir = path / "collections"
        self._aliases_path = path / "aliases.json"
        self._hnsw_m = hnsw_m
        self._hnsw_ef_construct = hnsw_ef_construct
        self._quantization = quantization
        self._tuning = tuning
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

    def _resolve_locked(self, name: str) -> str:
        if self._closed:
            raise StoreError("the store is closed")
        target = self._aliases.get(name, name)
        coll = self._collections.get(target)
        if coll is None or coll.dropping:
            raise CollectionNotFound(name)
        return target

    def _open(self, name: str) -> OpenShard:
        with self._mutex:
            return self._collections[self._resolve_locked(name)]

    def _has_keywords(self, name: str) -> bool:
        return self._open(name).keywords

    @contextmanager
    def _shard(self, name: str) -> Iterator[qe.EdgeShard]:
        coll = self._open(name)
        with coll.lock.read(), engine_errors():
            if coll.shard is None:  # dropped or closed while we waited
                raise CollectionNotFound(name)
            yield coll.shard

    def create_collection(self, name: str, dim: int, *, bulk: bool = False) -> None:
        # The engine builds no index while it is written to (optimize() does): nothing to defer.
        model_version_of(name)  # only PhotoSearch names: they are also safe folder names
        with self._mutex:
            if self._closed:
                raise StoreError("the store is closed")
            existing = self._collections.get(name)
            if existing is not None:
                if existing.dropping:
                    raise StoreError(f"collection {name!r} is being dropped")
                if existing.dim != dim:
                    raise StoreError(f"collection {name!r} has dim {existing.dim}, not {dim}")
                return
            if name in self._aliases:
                raise StoreError(f"{name!r} is an alias")
            self._room.check("new collection")
            shard_dir = self._shards_dir / name
            # A folder without its metadata file is a create that crashed half-way: empty.
            shutil.rmtree(shard_dir, ignore_errors=True)
            with engine_errors():
                shard = qe.EdgeShard.create(
                    str(shard_dir),
                    shard_config(dim, self._hnsw_m, self._hnsw_ef_construct, self._quantization),
                )
                try:
                    create_indexes(shard, missing_indexes(shard))
                    shard.flush()
                except BaseException:
                    shard.close()  # else it keeps the folder locked
                    raise
            _write_json_atomic(self._shards_dir / f"{name}.json", {"dim": dim, "keywords": True})
            self._collections[name] = OpenShard(shard, dim, RWLock(), keywords=True)

    def ensure_indexes(self, collection: str) -> None:
        name = self.resolve(collection)
        coll = self._open(name)
        with self._shard(name) as shard:
            missing = missing_indexes(shard)
            if missing:  # a collection of an earlier release: a write, which needs room
                self._room.check("payload index")
                create_indexes(shard, missing)
            if not coll.keywords:  # and its keywords: every photo's vector is written
                self._room.check("keywords")
                add_keywords(shard)
                shard.flush()  # before the metadata file says it is done
                meta = {"dim": coll.dim, "keywords": True}
                _write_json_atomic(self._shards_dir / f"{name}.json", meta)
                coll.keywords = True

    def finish_bulk_load(self, collection: str) -> None:
        self.optimize(collection)

    def index_ready(self, collection: str) -> bool:
        self.resolve(collection)
        return True  # optimize() blocks until the index is built

    def has_collection(self, name: str) -> bool:
        with self._mutex:
            coll = self._collections.get(name)
            return coll is not None and not coll.dropping

    def drop_collection(self, name: str) -> None:
        with self._mutex:
            if self._closed:
                raise StoreError("the store is closed")
            coll = self._collections.get(name)
            if coll is None or coll.dropping:
                raise CollectionNotFound(name)
            aliased = sorted(a for a, target in self._aliases.items() if target == name)
            if aliased:
                raise StoreError(f"collection {name!r} is aliased by {', '.join(aliased)}")
            coll.dropping = True  # new calls now see it gone; set_aliases refuses it
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

    def collections(self) -> list[CollectionInfo]:
        with self._mutex:
            dims = {n: c.dim for n, c in self._collections.items() if not c.dropping}
            aliases = dict(self._aliases)
        infos = []
        for name in sorted(dims, key=lambda n: (model_version_of(n), n)):
            try:
                points = self.count(name)
            except CollectionNotFound:
                continue  # dropped meanwhile
            aliased = tuple(sorted(a for a, t in aliases.items() if t == name))
            infos.append(CollectionInfo(name, model_version_of(name), dims[name], points, aliased))
        return infos

    def aliases(self) -> dict[str, str]:
        with self._mutex:
            return dict(self._aliases)

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        with self._mutex:
            if self._closed:
                raise StoreError("the store is closed")
            updated = dict(self._aliases)
            for alias, target in targets.items():
                if alias in self._collections:
                    raise StoreError(f"{alias!r} is a collection, not an alias")
                if target is None:
                    updated.pop(alias, None)
                    continue
                coll = self._collections.get(target)
                if coll is None or coll.dropping:
                    raise CollectionNotFound(target)
                updated[alias] = target
            _write_json_atomic(self._aliases_path, updated)
            self._aliases = updated

    def resolve(self, name: str) -> str:
        with self._mutex:
            return self._resolve_locked(name)

    def upsert(self, collection: str, points: Sequence[PhotoPoint]) -> None:
        if not points:
            return
        # Without the keywords vector (a shard of an earlier release), until ensure_indexes.
        keywords = self._has_keywords(collection)
        batch = []
        for p in points:
            payload = {**p.payload, "photo_id": p.photo_id}
            embedding = np.asarray(p.vector, dtype=np.float32).tolist()
            vectors = point_vectors(embedding, payload if keywords else {})
            batch.append(qe.Point(point_id(p.photo_id), vectors, payload))
        self._room.check("upsert")
        with self._shard(collection) as shard:
            # The WAL makes this survive a killed process without a flush (tested).
            shard.update(qe.UpdateOperation.upsert_points(batch))

    def set_payload(self, collection: str, photo_id: str, payload: dict[str, Any]) -> None:
        self.set_payloads(collection, {photo_id: payload})

    def set_payloads(self, collection: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        if not payloads:
            return
        written = {pid: {**payload, "photo_id": pid} for pid, payload in payloads.items()}
        # The keywords first: the payload's meta_hash says the photo is up to date. The payload
        # is merged, so fields it does not name (the indexer's group label) are kept.
        ops = keyword_updates(written) if self._has_keywords(collection) else []
        ops += [qe.UpdateOperation.set_payload([point_id(pid)], p) for pid, p in written.items()]
        self._room.check("payload update")
        with self._shard(collection) as shard:
            for op in ops:
                shard.update(op)

    def set_shard(self, collection: str, shard: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        op = qe.UpdateOperation.set_payload(
            [point_id(pid) for pid in photo_ids], {SHARD_FIELD: shard}
        )
        self._room.check("payload update")
        with self._shard(collection) as edge:
            edge.update(op)

    def set_group(self, collection: str, group: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        op = qe.UpdateOperation.set_payload(
            [point_id(pid) for pid in photo_ids], {GROUP_FIELD: group}
        )
        self._room.check("payload update")
        with self._shard(collection) as edge:
            edge.update(op)

    def delete(self, collection: str, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        op = qe.UpdateOperation.delete_points([point_id(pid) for pid in photo_ids])
        self._room.check("delete")  # it too appends to the write-ahead log
        with self._shard(collection) as shard:
            shard.update(op)

    def delete_in_shard(self, collection: str, shard: str | None, photo_ids: Sequence[str]) -> None:
        if not photo_ids:
            return
        op = qe.UpdateOperation.delete_points_by_filter(edge_filters.in_shard(shard, photo_ids))
        self._room.check("delete")
        with self._shard(collection) as edge:
            edge.update(op)

    def count(self, collection: str) -> int:
        with self._shard(collection) as shard:
            return shard.count(qe.CountRequest(exact=True))

    def shard_sizes(self, collection: str) -> dict[str, int]:
        request = qe.FacetRequest(key=SHARD_FIELD, limit=MAX_SHARDS, exact=True)
        with self._shard(collection) as shard:
            hits = shard.facet(request).hits
        return {str(hit.value): hit.count for hit in hits}

    def shard_labels(self, collection: str) -> list[str]:
        # Not exact: the index's own counts, read in ~0.1 ms whatever the size (an exact facet
        # reads every point: 150 ms at 1e6), and a label with no point left is not among them.
        request = qe.FacetRequest(key=SHARD_FIELD, limit=MAX_SHARDS, exact=False)
        with self._shard(collection) as shard:
            hits = shard.facet(request).hits
        return [str(hit.value) for hit in hits if hit.count]

    def points(
        self, collection: str, *, shard: str | None = None, unlabelled: bool = False
    ) -> Iterator[IndexedPoint]:
        return self._scroll(collection, edge_filters.shard_filter(shard, unlabelled=unlabelled))

    def _scroll(self, collection: str, where: qe.Filter | None) -> Iterator[IndexedPoint]:
        offset: qe.PointId | None = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=SCROLL_PAGE,
                filter=where,
                with_payload=qe.PayloadSelector.Include(POINT_FIELDS),
                with_vector=False,
            )
            # One page per lock hold: the caller may keep the generator suspended for long.
            with self._shard(collection) as shard:
                records, offset = shard.scroll(request)
            yield from (indexed_point(record.payload) for record in records)
            if offset is None:
                return

    def points_by_id(self, collection: str, photo_ids: Sequence[str]) -> list[IndexedPoint]:
        if not photo_ids:
            return []
        ids: list[qe.PointId] = [point_id(pid) for pid in photo_ids]
        with self._shard(collection) as shard:
            records = shard.retrieve(ids, qe.PayloadSelector.Include(POINT_FIELDS), False)
        return [indexed_point(record.payload) for record in records]

    def points_by_key(self, collection: str, keys: Sequence[str]) -> list[IndexedPoint]:
        if not keys:
            return []
        return list(self._scroll(collection, edge_filters.with_keys(keys)))

    def optimize(self, collection: str) -> None:
        # It writes new segments beside the old ones before it drops them: up to their size.
        self._room.check("optimize", folder_bytes(self._shards_dir / self.resolve(collection)))
        with self._shard(collection) as shard:
            shard.optimize()

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
