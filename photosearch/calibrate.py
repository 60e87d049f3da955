"""`photosearch model calibrate`: fit one model version's search to its own embeddings.

The hybrid fusion (RRF's k, the keyword ranking's weight) and the near-duplicate threshold
were set on ViT-B-32 with random weights; what suits one model's embeddings does not suit
another's. This measures them on a judgement set and its photos, with the version's own
exported graphs (onnxruntime: no Triton needed), in a scratch store of the same engine the
product runs, and writes them into the version's manifest, which the API and the workers read:

- the fusion: every (k, weight) of a small grid ranks each judged query through the store's
  own weighted RRF; the best mean nDCG@10 wins, the default (60, 1) where it is as good;
- the threshold: the photos and their altered copies (crop, JPEG q40, flip), embedded; the
  lowest cosine above every pair of different photos (copies included), rounded up, so that
  grouping never hides a distinct photo behind another; and how many copies still group.

A judgement set that the gate also uses tunes the fusion to it: keep one apart if you can.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from core.embedding.arrays import AnyArray
from core.embedding.errors import InvalidImage
from core.embedding.images import decode_image, resize_and_crop
from core.embedding.manifest import (
    IMAGE_INPUT,
    IMAGE_MODEL,
    TEXT_INPUT,
    TEXT_MODEL,
    ModelManifest,
    SearchCalibration,
    load_manifest,
    write_manifest,
)
from core.embedding.tokenizer import load_tokenizer, pad_for
from core.keywords import query_vector
from core.payload import PhotoPayload
from core.quality.judgements import JudgementSet
from core.quality.metrics import ndcg_at
from core.settings import Settings
from core.sources import open_source
from core.vectorstore import PhotoPoint, VectorStore, collection_name, open_store
from indexer.plan.catalog import read_catalog
from model.calibration import ALTERATIONS
from model.precision import run_batches, session
from model.repository import version_dir
from query_api.search.ranking import RRF_K

RRF_KS = (10, 20, 40, 60, 100)
KEYWORD_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)
# A fusion must beat the default by more than this (mean nDCG@10) to replace it: smaller
# gains are the judgement set's noise.
MIN_GAIN = 0.005
DEPTH = 10
POOL = 100  # each ranking's depth in the fusion, as the API's default pool


class CalibrationError(RuntimeError):
    """The photos or judgements cannot calibrate this version (nothing is written)."""


@dataclass
class Photos:
    """The judged photos' embeddings and payloads, and their copies' embeddings."""

    ids: list[str]
    vectors: AnyArray
    payloads: list[PhotoPayload]
    copies: AnyArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    copy_of: AnyArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    copy_kind: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fusion:
    rrf_k: int
    keyword_weight: float
    ndcg: float


@dataclass(frozen=True)
class Report:
    """What calibrate measured: every fusion's nDCG@10, the single rankings', the threshold."""

    calibration: SearchCalibration
    fusions: list[Fusion]
    vector_ndcg: float
    keyword_ndcg: float
    threshold: float
    copies_grouped: dict[str, float]
    nearest_distinct: float


def embed_photos(
    repository: Path, manifest: ModelManifest, folder: Path, settings: Settings
) -> Photos:
    """The folder's photos (ids and metadata as the indexer reads them) and their copies,
    through the version's image graph."""
    source = open_source(str(folder.resolve()), settings)
    catalog = read_catalog(source, settings.indexer.metadata_files)
    spec = manifest.image
    pixels: list[AnyArray] = []
    copies: list[AnyArray] = []
    copy_of: list[int] = []
    kinds: list[str] = []
    ids: list[str] = []
    payloads: list[PhotoPayload] = []
    for photo in catalog.photos.values():
        try:
            image = decode_image(source.read(photo.key), spec.size)
        except (InvalidImage, OSError):
            continue
        row = len(ids)
        ids.append(photo.photo_id)
        payloads.append({**(photo.metadata or {})})
        pixels.append(resize_and_crop(image, spec))
        for kind, alter in ALTERATIONS.items():
            copies.append(resize_and_crop(alter(image), spec))
            copy_of.append(row)
            kinds.append(kind)
    if len(ids) < 2:
        raise CalibrationError(f"fewer than 2 readable photos in {folder}")
    graph = version_dir(repository, IMAGE_MODEL, manifest.version) / "model.onnx"
    sess, _ = session(graph)
    vectors = run_batches(sess, IMAGE_INPUT, np.stack(pixels))
    copied = run_batches(sess, IMAGE_INPUT, np.stack(copies))
    return Photos(ids, vectors, payloads, copied, np.array(copy_of), kinds)


def embed_texts(repository: Path, manifest: ModelManifest, texts: Sequence[str]) -> AnyArray:
    """The texts through the version's own tokenizer and text graph."""
    tokenizer = load_tokenizer(repository, manifest.version)
    graph = version_dir(repository, TEXT_MODEL, manifest.version) / "model.onnx"
    sess, _ = session(graph)
    rows = [
        run_batches(sess, TEXT_INPUT, pad_for(manifest.tokenizer, tokenizer.encode_batch([t]), 1))
        for t in texts
    ]
    return np.concatenate(rows)


def write_photos(store: VectorStore, name: str, photos: Photos) -> None:
    """A new collection of the embedded photos, with their payloads (the keyword side's words)."""
    store.create_collection(name, int(photos.vectors.shape[1]))
    store.upsert(
        name,
        [
            PhotoPoint(pid, photos.vectors[i], photos.payloads[i])
            for i, pid in enumerate(photos.ids)
        ],
    )


def _scratch_store(folder: Path, photos: Photos) -> tuple[VectorStore, str]:
    """The engine the product runs by default (Qdrant Edge), holding the judged photos."""
    store = open_store(Settings(data_dir=folder))
    name = collection_name(1, "calibrate")
    write_photos(store, name, photos)
    return store, name


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def fit_fusion(
    store: VectorStore,
    collection: str,
    judgements: JudgementSet,
    queries: AnyArray,
) -> tuple[list[Fusion], float, float]:
    """Every fusion of the grid, best first, and the vector and keyword rankings' nDCG@10."""
    grades = [judgements.qrels.get(q.id, {}) for q in judgements.queries]
    words = [query_vector(q.text) for q in judgements.queries]
    by_vector = [
        [h.photo_id for h in store.search(collection, queries[i], limit=DEPTH)]
        for i in range(len(grades))
    ]
    by_words = [
        [h.photo_id for h in store.keyword_search(collection, w, limit=DEPTH)] if w.indices else []
        for w in words
    ]
    fusions = []
    for k in RRF_KS:
        for weight in KEYWORD_WEIGHTS:
            scores = []
            for i, query in enumerate(queries):
                hits = store.hybrid_search(
                    collection,
                    query,
                    words[i],
                    limit=POOL,
                    rrf_k=k,
                    keyword_weight=weight,
                    keep=DEPTH,
                )
                scores.append(ndcg_at([h.photo_id for h in hits], grades[i], DEPTH))
            fusions.append(Fusion(k, weight, _mean(scores)))
    default = next(f for f in fusions if (f.rrf_k, f.keyword_weight) == (RRF_K, 1.0))
    # Best first; the default leads unless another beats it by more than the noise.
    fusions.sort(key=lambda f: (-f.ndcg, f != default))
    if fusions[0].ndcg - default.ndcg <= MIN_GAIN:
        fusions.remove(default)
        fusions.insert(0, default)
    vector = _mean([ndcg_at(r, g, DEPTH) for r, g in zip(by_vector, grades, strict=True)])
    keyword = _mean([ndcg_at(r, g, DEPTH) for r, g in zip(by_words, grades, strict=True)])
    return fusions, vector, keyword


def fit_threshold(photos: Photos) -> tuple[float, float, dict[str, float]]:
    """The lowest threshold (3 decimals, at most 0.999) above the cosine of every pair of
    different photos, their copies included; that largest cosine; and the share of each kind
    of copy at or above the threshold to its own photo."""
    every = np.concatenate([photos.vectors, photos.copies])
    owner = np.concatenate([np.arange(len(photos.ids)), photos.copy_of])
    cosines = every @ every.T
    distinct = owner[:, None] != owner[None, :]
    nearest = float(cosines[distinct].max())
    threshold = min(0.999, math.floor(nearest * 1000) / 1000 + 0.001)
    own = np.einsum("ij,ij->i", photos.copies, photos.vectors[photos.copy_of])
    grouped = {
        kind: float(
            np.mean(
                [c >= threshold for c, k in zip(own, photos.copy_kind, strict=True) if k == kind]
            )
        )
        for kind in ALTERATIONS
    }
    return threshold, nearest, grouped


def calibrate(
    repository: Path,
    version: int,
    photos_dir: Path,
    judgements: JudgementSet,
    *,
    settings: Settings,
    now: datetime | None = None,
) -> Report:
    """Measure version N's fusion and threshold on the judged photos (nothing written)."""
    manifest = load_manifest(repository, version)
    photos = embed_photos(repository, manifest, photos_dir, settings)
    judged = {pid for grades in judgements.qrels.values() for pid in grades}
    if not judged & set(photos.ids):
        raise CalibrationError(
            f"none of the judged photos of {judgements.name} is in {photos_dir}: the qrels "
            "name photos by the ids the indexer gives them (the manifest's id, else the path)"
        )
    queries = embed_texts(repository, manifest, [q.text for q in judgements.queries])
    with tempfile.TemporaryDirectory(prefix="calibrate-") as scratch:
        store, collection = _scratch_store(Path(scratch), photos)
        try:
            fusions, vector, keyword = fit_fusion(store, collection, judgements, queries)
        finally:
            store.close()
    threshold, nearest, grouped = fit_threshold(photos)
    best = fusions[0]
    default = next(f for f in fusions if (f.rrf_k, f.keyword_weight) == (RRF_K, 1.0))
    figures = {
        "ndcg_vector": round(vector, 4),
        "ndcg_keyword": round(keyword, 4),
        "ndcg_hybrid_default": round(default.ndcg, 4),
        "ndcg_hybrid_calibrated": round(best.ndcg, 4),
        "nearest_distinct_cosine": round(nearest, 4),
        **{f"copies_grouped_{kind}": round(share, 4) for kind, share in grouped.items()},
    }
    calibration = SearchCalibration(
        rrf_k=best.rrf_k,
        keyword_weight=best.keyword_weight,
        duplicate_threshold=threshold,
        judgements=f"{judgements.name}: {len(judgements.queries)} queries, "
        f"{len(photos.ids)} photos of {photos_dir.name}",
        figures=figures,
        calibrated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
    )
    return Report(calibration, fusions, vector, keyword, threshold, grouped, nearest)


def save(repository: Path, version: int, calibration: SearchCalibration) -> Path:
    """Write the calibration into version N's manifest (read by the API and the workers when
    they next load the version)."""
    manifest = load_manifest(repository, version)
    if calibration.tagging is None and manifest.calibration is not None:
        # calibrate-tags' rule is measured apart: a new fusion keeps it.
        calibration = calibration.model_copy(update={"tagging": manifest.calibration.tagging})
    manifest.calibration = calibration
    return write_manifest(repository, manifest)
