"""A store ready to search: photos of clustered unit vectors (real embeddings cluster; uniform
random vectors are HNSW's worst case) with the payload the indexer writes, built once and kept."""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from core.embedding.arrays import Embeddings
from core.settings import Settings
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore, collection_name, open_store
from harness.models import WORK, default_repository
from harness.vocabulary import photo_payload

UPSERT_BATCH = 1000
STORE_SEED = 0
MARKER = "bench-store.json"
# What the store's points hold; a store of another format is built again. 2: the keyword
# vectors of titles and tags and a near-duplicate group in every payload; 3: the visual
# attributes, automatic tags, popularity and suggestion terms of issue 35 too.
STORE_FORMAT = 4
# Text queries: the noise's norm around a unit centre. The stored photos sit at cosine ~0.8 of
# theirs, so the best hits score ~0.3, as CLIP ViT-B-32's text-to-photo cosines do.
TEXT_NOISE = 3.2


def store_clusters(
    rng: np.random.Generator, dim: int, clusters: int
) -> tuple[Embeddings, Embeddings]:
    """The store's cluster centres (unit vectors) and each cluster's noise per dimension, as
    fill_store draws them first from a generator seeded with STORE_SEED."""
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # Noise of norm 0.5-1.0 around a unit centre: cosine to the centre ~0.7-0.9.
    spread = rng.uniform(0.5, 1.0, clusters).astype(np.float32) / math.sqrt(dim)
    return centres, spread


def fill_store(
    store: VectorStore, collection: str, dim: int, photos: int, clusters: int, version: int
) -> None:
    """`photos` unit vectors around `clusters` random centres (real embeddings cluster; uniform
    random vectors are HNSW's worst case), in upsert batches of UPSERT_BATCH."""
    rng = np.random.default_rng(STORE_SEED)
    r = random.Random(STORE_SEED)
    centres, spread = store_clusters(rng, dim, clusters)
    now = datetime.now(UTC).isoformat()
    started, reported = time.perf_counter(), 0
    for start in range(0, photos, UPSERT_BATCH):
        n = min(UPSERT_BATCH, photos - start)
        which = rng.integers(0, clusters, n)
        noise = rng.standard_normal((n, dim), dtype=np.float32) * spread[which, None]
        vectors = centres[which] + noise
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        points = []
        for j in range(n):
            photo_id, payload = photo_payload(r, start + j, version, now)
            points.append(PhotoPoint(photo_id, vectors[j], payload))
        store.upsert(collection, points)
        if (start + n) * 10 // photos > reported:
            reported = (start + n) * 10 // photos
            print(f"  {start + n} points, {time.perf_counter() - started:.0f} s", flush=True)


def ensure_store(
    settings: Settings, version: int, dim: int, photos: int, clusters: int, rebuild: bool
) -> tuple[VectorStore, str]:
    """The bench store (opened), built when missing, different or --rebuild; LIVE_ALIAS on it."""
    q = settings.qdrant
    path = q.path
    assert path is not None  # filled by Settings
    wanted = {
        "photos": photos,
        "clusters": clusters,
        "dim": dim,
        "model_version": version,
        "seed": STORE_SEED,
        "format": STORE_FORMAT,
        "hnsw_m": q.hnsw_m,
        "hnsw_ef_construct": q.hnsw_ef_construct,
        "quantization": q.quantization,
        "complete": True,
    }
    marker = settings.data_dir / MARKER
    collection = collection_name(version, "bench")
    have = json.loads(marker.read_text()) if marker.exists() else None
    if have == wanted and not rebuild:
        store = open_store(settings)
        if store.has_collection(collection) and store.count(collection) == photos:
            print(f"store: {path} ({photos} photos, built before)", flush=True)
            return store, collection
        store.close()
    if path.exists() and any(path.iterdir()) and have is None:
        raise SystemExit(
            f"{path} holds a store this benchmark did not build: give another --data-dir"
        )
    shutil.rmtree(path, ignore_errors=True)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Marks the folder as ours while it is built, so an interrupted build is rebuilt next time.
    marker.write_text(json.dumps({**wanted, "complete": False}, indent=2) + "\n")
    store = open_store(settings)
    print(f"building the store: {photos} photos x {dim} dims, {clusters} clusters ...", flush=True)
    store.create_collection(collection, dim)
    started = time.perf_counter()
    fill_store(store, collection, dim, photos, clusters, version)
    filled = time.perf_counter()
    print("  optimize (HNSW) ...", flush=True)
    store.optimize(collection)
    store.set_aliases({LIVE_ALIAS: collection})
    done = time.perf_counter()
    print(f"  upserts {filled - started:.0f} s, optimize {done - filled:.0f} s", flush=True)
    marker.write_text(json.dumps(wanted, indent=2) + "\n")
    return store, collection


def store_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and the store a benchmark builds once and reuses (api, recall, search)."""
    parser.add_argument("--arch", default="ViT-B-32", help="exported when --repository is empty")
    parser.add_argument(
        "--repository",
        type=Path,
        default=default_repository(),
        help="model repository, exported once and reused (default: var/benchmarks/models)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=WORK / "api",
        help="where the bench store is built once and reused (default: var/benchmarks/api)",
    )
    parser.add_argument("--photos", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=1000, help="centres of the vectors")
