"""Bench setup: the model and the Edge store (kept between runs), raw timings, the API process."""

from __future__ import annotations

import json
import math
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnxruntime as ort
from redis import Redis

from core.embedding.arrays import Embeddings
from core.embedding.manifest import TEXT_INPUT, TEXT_MODEL, list_versions, load_manifest
from core.embedding.tokenizer import ClipTokenizer, pad_batch
from core.settings import Settings
from core.vectorstore import (
    LIVE_ALIAS,
    PhotoPoint,
    VectorStore,
    collection_name,
    open_store,
)
from loadtests.vocabulary import photo_payload
from model.repository import version_dir
from model.triton_config import parse

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 20  # results per search, as the page asks
UPSERT_BATCH = 1000
STORE_SEED = 0
MARKER = "bench-store.json"


# ---------------------------------------------------------------------------------------------
# The model repository and the store, both cached under var/ between runs.


def ensure_model(repo: Path, arch: str) -> int:
    """The newest version in `repo`, exported (random weights) when there is none yet."""
    if repo.is_dir() and list_versions(repo):
        version = list_versions(repo)[-1]
        print(f"model: {repo} version {version} ({load_manifest(repo, version).arch})", flush=True)
        return version
    from model.export import export_model

    if repo.is_dir() and any(repo.iterdir()):
        if repo != default_repository():
            raise SystemExit(f"{repo} holds files but no exported version: give an empty folder")
        shutil.rmtree(repo)  # an export of ours that was interrupted
    print(f"exporting {arch} (random weights) into {repo}, about a minute ...", flush=True)
    started = time.perf_counter()
    manifest = export_model(arch, "none", repo)
    print(f"  exported version {manifest.version} in {time.perf_counter() - started:.0f} s")
    return manifest.version


def default_repository() -> Path:
    return ROOT / "var" / "bench-api" / "models"


def fill_store(
    store: VectorStore, collection: str, dim: int, photos: int, clusters: int, version: int
) -> None:
    """`photos` unit vectors around `clusters` random centres (real embeddings cluster; uniform
    random vectors are HNSW's worst case), in upsert batches of UPSERT_BATCH."""
    rng = np.random.default_rng(STORE_SEED)
    r = random.Random(STORE_SEED)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # Noise of norm 0.5-1.0 around a unit centre: cosine to the centre ~0.7-0.9.
    spread = rng.uniform(0.5, 1.0, clusters).astype(np.float32) / math.sqrt(dim)
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


# ---------------------------------------------------------------------------------------------
# Raw figures: the text encoder and the vector search alone, in this process.


def text_threads(repo: Path) -> int:
    """The intra-op threads Triton's python backend gives clip_text (0: onnxruntime's default)."""
    config = parse((repo / TEXT_MODEL / "config.pbtxt").read_text())
    param = config.parameters.get("intra_op_thread_count")
    return int(param.string_value) if param is not None else 0


def text_queue_delay_ms(repo: Path) -> float:
    config = parse((repo / TEXT_MODEL / "config.pbtxt").read_text())
    return float(config.dynamic_batching.max_queue_delay_microseconds) / 1000


@dataclass
class Raw:
    tokenize_ms: float
    text_ms: float
    search_ms: float = 0.0
    vectors: list[Embeddings] = field(default_factory=list)


def raw_text(
    repo: Path, version: int, timed: list[str], embedded: list[str], pad_multiple: int
) -> Raw:
    """Median tokenize and encode times of single queries (batch 1, padded as the client
    pads), and the embeddings of `embedded` for the raw search."""
    tokenizer = ClipTokenizer.from_repository(repo, version)
    context = load_manifest(repo, version).tokenizer.context_length
    options = ort.SessionOptions()
    options.intra_op_num_threads = text_threads(repo)
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(version_dir(repo, TEXT_MODEL, version) / "model.onnx"),
        options,
        providers=["CPUExecutionProvider"],
    )
    batches = [pad_batch(tokenizer.encode_batch([q]), pad_multiple, context) for q in timed]
    for batch in batches[:5]:  # warm-up
        session.run(None, {TEXT_INPUT: batch})
    tokenize, encode = [], []
    for query, batch in zip(timed, batches, strict=True):
        t0 = time.perf_counter()
        tokenizer.encode_batch([query])
        t1 = time.perf_counter()
        session.run(None, {TEXT_INPUT: batch})
        encode.append(time.perf_counter() - t1)
        tokenize.append(t1 - t0)
    vectors: list[Embeddings] = []
    for start in range(0, len(embedded), 64):
        ids = tokenizer.encode_batch(embedded[start : start + 64])
        out = session.run(None, {TEXT_INPUT: pad_batch(ids, pad_multiple, context)})[0]
        vectors.extend(np.asarray(out, dtype=np.float32))
    return Raw(
        tokenize_ms=float(np.median(tokenize)) * 1000,
        text_ms=float(np.median(encode)) * 1000,
        vectors=vectors,
    )


def raw_search(store: VectorStore, collection: str, vectors: list[Embeddings]) -> float:
    """Median ms of store.search(limit=LIMIT) with query embeddings, after a warm-up."""
    for vector in vectors[:20]:
        store.search(collection, vector, limit=LIMIT)
    times = []
    for vector in vectors:
        t0 = time.perf_counter()
        store.search(collection, vector, limit=LIMIT)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000


# ---------------------------------------------------------------------------------------------
# The API process.


@contextmanager
def api_process(env: dict[str, str], port: int, log: Path, log_level: str) -> Iterator[str]:
    """`photosearch api serve` in its own process until ready; SIGTERM when done. Yields its URL."""
    command = [sys.executable, "-m", "photosearch", "api", "serve"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", log_level]
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the API exited ({process.returncode}):\n{tail(log)}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API was not ready in 120 s:\n{tail(log)}")
            time.sleep(0.25)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def delete_prefix(redis_url: str, prefix: str) -> int:
    """Delete every key the API wrote under its prefix; returns how many."""
    redis = Redis.from_url(redis_url)
    try:
        keys = list(redis.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            redis.delete(*keys[start : start + 1000])
        return len(keys)
    finally:
        redis.close()
