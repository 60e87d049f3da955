"""A photo's named vectors: its embedding, and the keywords vector of its title, tags,
photographer and automatic tags (core/keywords.py), written beside it and added to collections
of older releases.

A photo without words gets no keywords vector at all, never an empty one: the engine counts the
points of its IDF wrong when an empty vector later gains words, and a word's IDF, and every
score with it, can then turn negative.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core import keywords
from core.embedding.arrays import Embeddings
from core.payload import PhotoPayload
from core.vectorstore.base import KEYWORDS_VECTOR, VECTOR_NAME, SparseVector, point_id
from core.vectorstore.engine import (
    DeleteVectors,
    Engine,
    HasVector,
    SetVectors,
    Where,
    Write,
    pages,
)


def dense(vector: Embeddings) -> list[float]:
    return np.asarray(vector, dtype=np.float32).tolist()  # type: ignore[no-any-return]


def point_vectors(
    embedding: list[float], payload: PhotoPayload
) -> dict[str, list[float] | SparseVector]:
    """A point's named vectors: the embedding, and the keywords of its payload if it has any."""
    vectors: dict[str, list[float] | SparseVector] = {VECTOR_NAME: embedding}
    words = keywords.document_vector(payload)
    if words.indices:
        vectors[KEYWORDS_VECTOR] = words
    return vectors


def keyword_writes(payloads: Mapping[str, PhotoPayload]) -> list[Write]:
    """Rewrite the keywords vectors of photos (photo id -> their new payload): a vector for
    those with words, none for the others (a delete, which the engine ignores where there is
    none)."""
    found: dict[str, dict[str, SparseVector]] = {}
    wordless: list[str] = []
    for photo_id, payload in payloads.items():
        vector = keywords.document_vector(payload)
        if vector.indices:
            found[point_id(photo_id)] = {KEYWORDS_VECTOR: vector}
        else:
            wordless.append(point_id(photo_id))
    writes: list[Write] = [SetVectors(found)] if found else []
    if wordless:
        writes.append(DeleteVectors(tuple(wordless), (KEYWORDS_VECTOR,)))
    return writes


def fill_keywords(engine: Engine, collection: str) -> None:
    """Give every photo without a keywords vector the one of its payload. Safe to run again
    after a crash half-way: only the photos still without one are read."""
    lacking = Where(must_not=(HasVector(KEYWORDS_VECTOR),))
    fields = (*keywords.WORD_FIELDS, "photo_id")
    for page in pages(engine, collection, lacking, fields=fields):
        found = {p.photo_id: p.payload for p in page}
        writes = [w for w in keyword_writes(found) if isinstance(w, SetVectors)]
        engine.update(collection, writes)
