"""The keywords vector on Qdrant Edge: written beside the embedding, and added to old shards.

A photo without words gets no keywords vector at all, never an empty one: the engine counts
the points of its IDF (N) wrong when an empty vector later gains words, and N can then fall
below a word's document count, which makes that word's IDF, and every score with it, negative.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import qdrant_edge as qe

from core import keywords
from core.vectorstore.base import (
    KEYWORDS_VECTOR,
    SCROLL_PAGE,
    VECTOR_NAME,
    SparseVector,
    point_id,
)

# The IDF modifier: the engine weighs each word by its rarity over the collection (BM25's IDF).
SPARSE_PARAMS = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)


def sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def point_vectors(embedding: list[float], payload: Mapping[str, Any]) -> dict[str, Any]:
    """A point's named vectors: the embedding, and the keywords of its payload if it has any."""
    vectors: dict[str, Any] = {VECTOR_NAME: embedding}
    words = keywords.document_vector(payload)
    if words.indices:
        vectors[KEYWORDS_VECTOR] = sparse(words)
    return vectors


def keyword_updates(payloads: Mapping[str, Mapping[str, Any]]) -> list[qe.UpdateOperation]:
    """Rewrite the keywords vectors of photos (photo id -> their new payload): a vector for
    those with words, none for the others (a delete, which the engine ignores where there is
    none)."""
    found: list[qe.PointVectors] = []
    wordless: list[qe.PointId] = []
    for photo_id, payload in payloads.items():
        words = keywords.document_vector(payload)
        if words.indices:
            found.append(qe.PointVectors(point_id(photo_id), {KEYWORDS_VECTOR: sparse(words)}))
        else:
            wordless.append(point_id(photo_id))
    ops = [qe.UpdateOperation.update_vectors(found)] if found else []
    if wordless:
        ops.append(qe.UpdateOperation.delete_vectors(wordless, [KEYWORDS_VECTOR]))
    return ops


def add_keywords(shard: qe.EdgeShard) -> int:
    """Give a shard of an earlier release its keywords vector, and its photos theirs (from
    their payloads). Safe to run again after a crash half-way: the engine keeps an existing
    vector as it is, and only photos without a keywords vector are read. Returns how many
    photos got one."""
    shard.update(qe.UpdateOperation.create_sparse_vector(KEYWORDS_VECTOR, qe.Modifier.Idf))
    lacking = qe.Filter(must_not=[qe.HasVectorCondition(KEYWORDS_VECTOR)])
    fields = [*keywords.FIELDS, "photo_id"]
    offset: qe.PointId | None = None
    added = 0
    while True:
        request = qe.ScrollRequest(
            offset=offset,
            limit=SCROLL_PAGE,
            filter=lacking,
            with_payload=qe.PayloadSelector.Include(fields),
            with_vector=False,
        )
        records, offset = shard.scroll(request)
        found = [
            qe.PointVectors(record.id, {KEYWORDS_VECTOR: sparse(words)})
            for record in records
            if (words := keywords.document_vector(record.payload or {})).indices
        ]
        if found:
            shard.update(qe.UpdateOperation.update_vectors(found))
            added += len(found)
        if offset is None:
            return added
