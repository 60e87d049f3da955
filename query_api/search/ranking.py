"""How a pool of candidates becomes a page: fusion of two rankings, near-duplicates collapsed,
maximal marginal relevance, newest first. Pure functions over the store's hits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import GROUP_FIELD, Hit

# Reciprocal rank fusion's constant (Cormack et al. 2009): a photo at rank r of a ranking
# adds 1 / (RRF_K + r). 60 keeps one ranking's top few from outweighing agreement between
# the two.
RRF_K = 60


def fuse(
    rankings: Sequence[Sequence[Hit]], k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[Hit]:
    """Reciprocal rank fusion: each photo's score is the sum of 1/(k + rank/weight) over the
    rankings that hold it (rank from 1; each ranking's weight 1 unless `weights` says: the
    engines' weighted RRF, which shortens a weighted ranking's ranks), best first; ties by
    photo id, as the store's own fusion orders them (so pages follow each other whichever
    fused). A hit keeps the first vector and payload seen."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for i, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[i]
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.photo_id] = fused.get(hit.photo_id, 0.0) + 1.0 / (k + rank / weight)
            if hit.photo_id not in first or (first[hit.photo_id].vector is None):
                first[hit.photo_id] = hit
    order = sorted(fused, key=lambda pid: (-fused[pid], pid))
    return [replace(first[pid], score=fused[pid]) for pid in order]


def group_of(hit: Hit) -> str:
    """A photo's near-duplicate group; a photo written before groups existed is its own."""
    return str(hit.payload.get(GROUP_FIELD) or hit.photo_id)


def collapse(hits: Sequence[Hit]) -> list[Hit]:
    """The best-ranked photo of each near-duplicate group, in rank order."""
    seen: set[str] = set()
    kept: list[Hit] = []
    for hit in hits:
        group = group_of(hit)
        if group not in seen:
            seen.add(group)
            kept.append(hit)
    return kept


# Pools up to this many candidates compute every pair's similarity at once (one matrix
# product at BLAS's full speed, 16 MB of float32 at most); larger ones a row per pick.
GRAM_MAX = 2048


def diversify(hits: Sequence[Hit], diversity: float, count: int) -> list[Hit]:
    """The first `count` of the hits re-ranked by maximal marginal relevance (Carbonell and
    Goldstein 1998): each next photo maximizes (1 - diversity) x relevance - diversity x its
    highest cosine similarity to a photo already chosen. Relevance is the hit's score scaled
    to 0..1 over the pool, so a fused or BM25 ranking works as a cosine one does. Hits need
    their vectors. CPU work that grows with count x len(hits): run it off the event loop."""
    if diversity <= 0 or len(hits) < 2:
        return list(hits[:count])
    vectors = np.stack([np.asarray(h.vector, dtype=np.float32) for h in hits])
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores = np.array([h.score for h in hits], dtype=np.float64)
    spread = scores.max() - scores.min()
    relevance = (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    base = ((1 - diversity) * relevance).astype(np.float32)
    gram = vectors @ vectors.T if len(hits) <= GRAM_MAX else None

    def similarities(i: int) -> Embeddings:
        row: Embeddings = gram[i] if gram is not None else vectors @ vectors[i]
        return row

    # Nothing is chosen yet: the first pick is the most relevant.
    best = int(np.argmax(base))
    chosen = [best]
    # Each candidate's highest similarity to the chosen ones; +inf once chosen itself, so
    # that its value is -inf (diversity > 0) and it is never picked twice.
    closest = np.array(similarities(best), dtype=np.float32)
    closest[best] = np.inf
    value = np.empty_like(closest)
    for _ in range(min(count, len(hits)) - 1):
        np.multiply(closest, -diversity, out=value)
        value += base
        best = int(np.argmax(value))
        chosen.append(best)
        np.maximum(closest, similarities(best), out=closest)
        closest[best] = np.inf
    return [hits[i] for i in chosen]


def _created(hit: Hit) -> datetime | None:
    value = hit.payload.get("created_at")
    try:
        when = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    # A date without a zone is taken as UTC, so it compares with those that have one.
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def newest_first(hits: Sequence[Hit]) -> list[Hit]:
    """By created_at, newest first; photos without a (readable) date last; ties keep rank."""
    dates = [(_created(h), h) for h in hits]
    dated = sorted(((d, h) for d, h in dates if d is not None), key=lambda p: p[0], reverse=True)
    return [h for _, h in dated] + [h for d, h in dates if d is None]
