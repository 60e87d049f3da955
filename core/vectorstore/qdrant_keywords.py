"""The keywords vector on a Qdrant server: its config, and its writes beside the embedding.

As on Qdrant Edge (same engine), a photo without words gets no keywords vector rather than an
empty one, whose later words the engine's IDF count (N) misses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qdrant_client import models as qm

from core import keywords
from core.vectorstore.base import KEYWORDS_VECTOR, VECTOR_NAME, SparseVector, point_id

# The IDF modifier: the server weighs each word by its rarity over the collection (BM25's IDF).
SPARSE_CONFIG = {KEYWORDS_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)}


def sparse(vector: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))


def point_vectors(embedding: list[float], payload: Mapping[str, Any]) -> dict[str, Any]:
    """A point's named vectors: the embedding, and the keywords of its payload if it has any."""
    vectors: dict[str, Any] = {VECTOR_NAME: embedding}
    words = keywords.document_vector(payload)
    if words.indices:
        vectors[KEYWORDS_VECTOR] = sparse(words)
    return vectors


def keyword_updates(payloads: Mapping[str, Mapping[str, Any]]) -> list[qm.UpdateOperation]:
    """Rewrite the keywords vectors of photos (photo id -> their new payload): a vector for
    those with words, none for the others (a delete, ignored where there is none)."""
    found: list[qm.PointVectors] = []
    wordless: list[qm.ExtendedPointId] = []
    for photo_id, payload in payloads.items():
        words = keywords.document_vector(payload)
        if words.indices:
            vector: qm.VectorStruct = {KEYWORDS_VECTOR: sparse(words)}
            found.append(qm.PointVectors(id=point_id(photo_id), vector=vector))
        else:
            wordless.append(point_id(photo_id))
    ops: list[qm.UpdateOperation] = []
    if found:
        ops.append(qm.UpdateVectorsOperation(update_vectors=qm.UpdateVectors(points=found)))
    if wordless:
        gone = qm.DeleteVectors(points=wordless, vector=[KEYWORDS_VECTOR])
        ops.append(qm.DeleteVectorsOperation(delete_vectors=gone))
    return ops
