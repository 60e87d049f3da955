"""The api benchmark's baseline: the text encoder and the vector search alone, in this process,
which an uncached search through the API is held against."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.embedding.arrays import Embeddings
from core.embedding.manifest import TEXT_INPUT, TEXT_MODEL, load_manifest
from core.embedding.tokenizer import ClipTokenizer, pad_batch
from core.vectorstore import VectorStore
from loadtests.encoders import encoder
from loadtests.openloop import LIMIT
from model.triton_config import parse


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
    session = encoder(repo, TEXT_MODEL, version, text_threads(repo))
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
