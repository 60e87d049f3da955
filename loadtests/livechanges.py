"""The live side of a reindex benchmark: a live collection as a sync leaves it, and files
changed in the catalogue, logged for the collections that follow the live one and written to
it as an increment does."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from core.vectorstore import KEY_FIELD, LIVE_ALIAS, SHARD_FIELD, PhotoPoint, collection_name
from harness.photos import DISTINCT, PER_FOLDER, small_photo
from indexer.plan.catalog import Photo, photo_of
from indexer.plan.shards import ShardMap, load_map, split_bounds
from indexer.runtime import Runtime
from loadtests.jobtasks import Clustered

LIVE_DIM = 32  # the live collection's (old) model: its vectors are never searched here


def fill_live(rt: Runtime, root: Path, shard_size: int) -> tuple[str, ShardMap]:
    """The live collection: a point per photo, labelled by its shard, with what the reindex
    reads of it (keys, versions, shard labels); the old model's vectors."""
    source = rt.source(str(root))
    shards = ShardMap(split_bounds((obj.key for obj in source.list_range()), shard_size))
    live = collection_name(1, "live")
    rt.store.create_collection(live, LIVE_DIM)
    old_model = Clustered(LIVE_DIM, 64, seed=1)
    chunk: list[tuple[Photo, str]] = []
    for obj in source.list_range():
        chunk.append((photo_of(obj, None), shards.label_of(obj.key)))
        if len(chunk) == 1000:
            write_live(rt, live, chunk, old_model)
            chunk = []
    write_live(rt, live, chunk, old_model)
    rt.store.set_aliases({LIVE_ALIAS: live})
    return live, shards


def write_live(rt: Runtime, live: str, photos: list[tuple[Photo, str]], model: Clustered) -> None:
    """Points as the sync's writer labels them, its other payload left out (5x faster)."""
    vectors = model.take(len(photos))
    points = [
        PhotoPoint(
            photo.photo_id,
            vector,
            {
                KEY_FIELD: photo.key,
                "content_version": photo.version,
                "meta_hash": photo.meta_hash,
                SHARD_FIELD: label,
                "model_version": 1,
            },
        )
        for (photo, label), vector in zip(photos, vectors, strict=True)
    ]
    rt.store.upsert(live, points)


class Changes:
    """Files put, rewritten and deleted in the catalogue (a third each), each original photo
    changed at most once; the live side's capture and increment of them."""

    def __init__(self, root: Path, photos: int, seed: int = 2) -> None:
        self.root, self.photos = root, photos
        self.rng = np.random.default_rng(seed)
        self.used: set[int] = set()
        self.images = [small_photo(DISTINCT + 1 + i) for i in range(8)]
        self.made = 0

    def make(self, n: int) -> list[str]:
        keys = []
        for _ in range(n):
            i = int(self.rng.integers(self.photos))
            while i in self.used:
                i = int(self.rng.integers(self.photos))
            self.used.add(i)
            folder = f"f{i // PER_FOLDER:05d}"
            kind = self.made % 3
            self.made += 1
            if kind == 0:  # a new photo beside it
                key = f"{folder}/n{i:08d}.jpg"
            else:
                key = f"{folder}/p{i:08d}.jpg"
            path = self.root / key
            if kind == 2:
                path.unlink()
            else:
                path.write_bytes(self.images[self.made % len(self.images)])
            keys.append(key)
        return keys

    def live_side(self, rt: Runtime, live: str, keys: list[str], model: Clustered) -> float:
        """Log the keys for the followers as an increment of the live collection does, and
        make the increment's changes to the live collection; the capture's seconds."""
        shards = load_map(rt.store, live)
        started = time.perf_counter()
        rt.capture.capture_mapped(shards, keys)
        seconds = time.perf_counter() - started
        source = rt.source(str(self.root))
        present: list[tuple[Photo, str]] = []
        gone: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            obj = source.stat(key)
            if obj is None:
                gone[shards.label_of(key)].append(key)  # no manifest: the key is the photo id
            else:
                present.append((photo_of(obj, None), shards.label_of(key)))
        write_live(rt, live, present, model)
        for label, photo_ids in gone.items():
            rt.store.delete_in_shard(live, label, photo_ids)
        return seconds
