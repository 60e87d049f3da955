"""Automatic tags of a model version: its vocabulary embedded once, a photo's tags from its vector.

A worker tags with the `Tagger` of the job's model version: the vocabulary (a file, read at
every job step, so an edited file takes effect at the next sync) embedded by that version's
text encoder through Triton, and the rule of the version's tag calibration (its manifest).
The embedding is made once per (model, vocabulary digest) in a worker process and kept in a
file under the data folder, so a restarted worker reads it back instead of asking Triton.
Each photo's tags carry the tagger's key (`auto_tags_vocabulary`): a point whose key is not
its version's current one is re-tagged by the next sync from its stored vector
(indexer/plan/diff.py, planner.py), with no image inference.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from core.atomicfile import write_atomic
from core.embedding.arrays import Embeddings
from core.embedding.errors import ModelVersionUnavailable
from core.embedding.manifest import ModelManifest
from core.jobs import Jobs
from core.payload import PhotoPayload
from core.settings_indexer import IndexerSettings
from core.tagging.rule import TagRule, auto_tags, tagging_key
from core.tagging.vocabulary import Vocabulary, VocabularyError, embed_vocabulary, load_vocabulary
from core.vectorstore import VectorStore
from core.vectorstore.base import AUTO_TAGS_FIELD, TAGGED_WITH_FIELD

# Texts of one model version to embed -> [N, D]; blocking (a task thread's call).
EmbedTexts = Callable[[list[str], int], Embeddings]
CALIBRATE = "not calibrated (run photosearch model calibrate-tags --version {version})"


@dataclass(frozen=True, eq=False)
class Tagger:
    """What a model version tags with. `key` is what its photos' tags carry: the vocabulary
    and rule when on (`reason`: a caveat, if any); "" when tags are off (`reason` says why:
    none are stored); None when it cannot tell (a vocabulary file that does not read, a version
    not in the repository): a sync keeps the tags stored and new photos get none, until it
    can."""

    version: int
    key: str | None
    reason: str = ""
    names: tuple[str, ...] = ()
    tag_vectors: Embeddings | None = None
    rule: TagRule | None = None
    max_tags: int = 10

    @property
    def on(self) -> bool:
        return bool(self.key)

    def tag(self, vectors: Embeddings) -> list[list[str]]:
        """Each photo's tags, best first; none for every photo when tags are off."""
        if not self.on or self.tag_vectors is None or self.rule is None:
            return [[] for _ in range(len(vectors))]
        return auto_tags(vectors, self.names, self.tag_vectors, self.rule, max_tags=self.max_tags)

    def fields(self, vectors: Embeddings) -> list[PhotoPayload]:
        """Each photo's payload fields of its tags."""
        key = self.key or ""
        return [{AUTO_TAGS_FIELD: tags, TAGGED_WITH_FIELD: key} for tags in self.tag(vectors)]

    def note(self) -> str | None:
        """The line a job's record shows when this version stores no tags, or tags with a
        caveat (`reason` of a tagger that is on); None otherwise."""
        if self.on:
            return (
                f"model version {self.version}: auto tags: {self.reason}" if self.reason else None
            )
        return f"model version {self.version}: auto tags off: {self.reason}"


def model_key(manifest: ModelManifest) -> str:
    """The exported files of a model version: a re-export under the same number differs."""
    files = json.dumps(sorted(manifest.files.items()))
    return hashlib.sha256(files.encode()).hexdigest()[:16]


class Taggers:
    """The taggers of one worker process, by model version; safe across task threads."""

    def __init__(
        self,
        settings: IndexerSettings,
        *,
        manifest: Callable[[int], ModelManifest],
        embed: EmbedTexts,
        cache_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.manifest = manifest
        self.embed = embed
        self.cache_dir = cache_dir
        self._embedded: dict[tuple[int, str, str], Embeddings] = {}
        self._lock = threading.Lock()
        self._making: dict[tuple[int, str, str], threading.Lock] = {}

    def __call__(self, version: int) -> Tagger:
        """Version `version`'s tagger now (the vocabulary file read again), embedded."""
        tagger, made = self._settle(version)
        if made is None:
            return tagger
        return replace(tagger, tag_vectors=self.vectors(*made))

    def describe(self, version: int) -> Tagger:
        """Version `version`'s tagger without its vocabulary's embedding: whether it tags,
        why not, and the key of its tags (no Triton asked)."""
        return self._settle(version)[0]

    def _settle(self, version: int) -> tuple[Tagger, tuple[ModelManifest, Vocabulary] | None]:
        if not self.settings.auto_tags:
            return Tagger(version, "", "PHOTOSEARCH_INDEXER__AUTO_TAGS is false"), None
        try:
            manifest = self.manifest(version)
        except ModelVersionUnavailable as exc:
            return Tagger(version, None, str(exc)), None
        calibration = manifest.calibration.tagging if manifest.calibration else None
        if calibration is None:
            return Tagger(version, "", CALIBRATE.format(version=version)), None
        if not calibration.enabled:
            reason = calibration.reason or "its tags are no better than chance"
            return Tagger(version, "", reason), None
        try:
            vocabulary = load_vocabulary(self.settings.tag_vocabulary)
        except VocabularyError as exc:
            return Tagger(version, None, str(exc)), None
        rule = calibration.rule()
        measured = calibration.vocabulary_digest
        # The margin is over the vocabulary's mean: another vocabulary shifts it. The tags are
        # made all the same (a vocabulary change re-tags), and the job says to recalibrate.
        caveat = (
            f"the vocabulary (digest {vocabulary.digest}) is not the one its rule was "
            f"calibrated with ({measured}): run photosearch model calibrate-tags --version "
            f"{version} with it for a rule and figures that hold"
            if measured and measured != vocabulary.digest
            else ""
        )
        tagger = Tagger(
            version,
            tagging_key(vocabulary.digest, rule, calibration.max_tags),
            caveat,
            names=vocabulary.names,
            rule=rule,
            max_tags=calibration.max_tags,
        )
        return tagger, (manifest, vocabulary)

    def vectors(self, manifest: ModelManifest, vocabulary: Vocabulary) -> Embeddings:
        """The vocabulary's [V, D] embedding by this model: made once per process (the other
        task threads asking wait for it), and read from the cache file where one was kept."""
        key = (manifest.version, model_key(manifest), vocabulary.digest)
        with self._lock:
            if key in self._embedded:
                return self._embedded[key]
            making = self._making.setdefault(key, threading.Lock())
        with making:
            with self._lock:
                if key in self._embedded:
                    return self._embedded[key]
            found = self._read(key, len(vocabulary), manifest.embedding_dim)
            if found is None:
                found = embed_vocabulary(vocabulary, lambda texts: self.embed(texts, key[0]))
                self._write(key, found)
            with self._lock:
                self._embedded[key] = found
                self._making.pop(key, None)
            return found

    def _path(self, key: tuple[int, str, str]) -> Path | None:
        version, model, digest = key
        return (
            None if self.cache_dir is None else self.cache_dir / f"m{version}-{model}-{digest}.npy"
        )

    def _read(self, key: tuple[int, str, str], names: int, dim: int) -> Embeddings | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            found = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None  # torn or foreign: made again
        if found.shape != (names, dim) or found.dtype != np.float32:
            return None
        return found  # type: ignore[no-any-return]

    def _write(self, key: tuple[int, str, str], vectors: Embeddings) -> None:
        path = self._path(key)
        if path is None:
            return
        out = io.BytesIO()
        np.save(out, np.asarray(vectors, dtype=np.float32), allow_pickle=False)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, out.getvalue())
        except OSError:
            pass  # a read-only data folder: the process keeps it in memory all the same


def note_off(jobs: Jobs, job_id: str, taggers: Taggers, version: int) -> None:
    """Say once in the job's record that its version stores no automatic tags, and why (or
    that its rule was calibrated with another vocabulary)."""
    line = taggers.describe(version).note()
    if line is not None and line not in jobs.problems(job_id):
        jobs.note_problems(job_id, [line])


def with_tags(
    store: VectorStore,
    collection: str,
    tagger: Tagger,
    payloads: Mapping[str, PhotoPayload],
) -> dict[str, PhotoPayload]:
    """Payloads of stored photos (photo id -> payload) with their automatic tags, for a
    payload-only write: from the stored vectors when tags are on (no image is read or sent
    to Triton), none when off, the stored ones kept when the tagger cannot tell. Every
    payload write carries them, so that the keywords vector made from it keeps their words."""
    ids = list(payloads)
    if tagger.key is None:
        stored = store.retrieve(collection, ids, fields=(AUTO_TAGS_FIELD, TAGGED_WITH_FIELD))
        kept: dict[str, PhotoPayload] = {
            photo.photo_id: {
                AUTO_TAGS_FIELD: list(photo.payload.get(AUTO_TAGS_FIELD) or []),
                TAGGED_WITH_FIELD: str(photo.payload.get(TAGGED_WITH_FIELD) or ""),
            }
            for photo in stored
        }
    elif tagger.on:
        read = store.retrieve(collection, ids, with_vectors=True, fields=())
        found = [(p.photo_id, p.vector) for p in read if p.vector is not None]
        vectors = np.stack([v for _, v in found]) if found else np.zeros((0, 1), np.float32)
        kept = dict(zip((pid for pid, _ in found), tagger.fields(vectors), strict=True))
    else:
        kept = {}
    # Off, or a photo gone meanwhile: no tags, keyed "" (a later sync tags one it finds).
    empty: PhotoPayload = {AUTO_TAGS_FIELD: [], TAGGED_WITH_FIELD: ""}
    return {pid: payload | kept.get(pid, empty) for pid, payload in payloads.items()}
