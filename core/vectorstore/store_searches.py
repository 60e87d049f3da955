"""The store's searches: nearest, by keywords, hybrid, by examples, in batches (see VectorStore)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import filters
from core.vectorstore.base import (
    KEYWORDS_VECTOR,
    VECTOR_NAME,
    Hit,
    KeywordsUnavailable,
    SearchFilter,
    SearchTuning,
    SparseVector,
    payload_fields,
)
from core.vectorstore.boosts import boosted
from core.vectorstore.engine import Boosted, Engine, Nearest, Prefetch, Recommend, Rrf, Search
from core.vectorstore.keyword_vectors import dense

# Hits read past a kept fusion's cut, for the ties at it (hybrid_search).
_TIE_MARGIN = 16


def selection(fields: Sequence[str] | None) -> tuple[str, ...] | None:
    """A search's payload selection: these fields and photo_id (None: the whole payload).
    Every hit costs CPU to hand over, the more so the more of its payload it carries: a
    facet count's pool of 1,000 reads in 39 ms with six fields, 99 ms whole (Qdrant Edge,
    100,000 photos)."""
    selected = payload_fields(fields)
    return None if selected is None else tuple(selected)


class Searches:
    """Searches of stored photos, best first. Every method is blocking."""

    _engine: Engine
    _tuning: SearchTuning

    def search(
        self,
        collection: str,
        vector: Embeddings,
        *,
        limit: int,
        offset: int = 0,
        filter: SearchFilter | None = None,
        score_threshold: float | None = None,
        tuning: SearchTuning | None = None,
        with_vectors: bool = False,
        boost: Boosted | None = None,
        pool: int | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Nearest photos by cosine similarity, best first; `tuning` replaces the store's
        search parameters for this search (exact search, the recall benchmark). `boost`:
        the best `pool` (None: offset + limit) re-scored by its formula (boosts.boosted).
        `fields`: the payload fields each hit carries besides photo_id (None: all)."""
        search = Search(
            Nearest(dense(vector), VECTOR_NAME),
            limit,
            offset,
            filter=filters.search_filter(filter),
            score_threshold=score_threshold,
            tuning=tuning or self._tuning,
            fields=selection(fields),
            with_vector=with_vectors,
        )
        return self._engine.query(collection, boosted(search, boost, pool))

    def _check_keywords(self, collection: str) -> None:
        if not self._engine.has_keywords(collection):
            raise KeywordsUnavailable(
                f"{collection!r} has no keywords yet: a sync adds them to a collection of "
                "the embedded store, a reindex to a server's"
            )

    def keyword_search(
        self,
        collection: str,
        keywords: SparseVector,
        *,
        limit: int,
        filter: SearchFilter | None = None,
        with_vectors: bool = False,
        boost: Boosted | None = None,
        pool: int | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Photos whose title, tags or photographer hold the query's words, best BM25 score
        first (core.keywords.query_vector); KeywordsUnavailable on a collection without them.
        `boost`, `pool`, `fields`: as search's."""
        self._check_keywords(collection)
        if not keywords.indices:
            return []
        # The sparse index is exact: no graph, so no search parameters.
        query = Nearest(keywords, KEYWORDS_VECTOR)
        where = filters.search_filter(filter)
        search = Search(
            query, limit, filter=where, fields=selection(fields), with_vector=with_vectors
        )
        return self._engine.query(collection, boosted(search, boost, pool))

    def hybrid_search(
        self,
        collection: str,
        vector: Embeddings,
        keywords: SparseVector,
        *,
        limit: int,
        rrf_k: int,
        keyword_weight: float = 1.0,
        filter: SearchFilter | None = None,
        with_vectors: bool = False,
        keep: int | None = None,
        boost: Boosted | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """The `limit` nearest photos and the `limit` best by keywords, fused by reciprocal
        rank fusion in one query: a photo at rank r (from 1) of a ranking adds
        1 / (rrf_k + r), and 1 / (rrf_k + r / keyword_weight) for the keyword ranking (the
        engines' weighted RRF; a model version's calibration,
        core.embedding.manifest.SearchCalibration). Best first; photos of equal score by
        photo id (Qdrant Edge returns ties in no fixed order, and the pages of a fused
        ranking need one). `keep`: only the
        best that many of the fusion (None: all of it, up to twice `limit`). Without words
        to match, the vector ranking alone; KeywordsUnavailable on a collection without
        keyword vectors. `boost`: the whole fusion re-scored by its formula, of which the
        first `keep` are read. `fields`: as search's."""
        where = filters.search_filter(filter)
        rankings = [Prefetch(Nearest(dense(vector), VECTOR_NAME), limit, where, None, self._tuning)]
        if keywords.indices:
            self._check_keywords(collection)
            rankings.append(Prefetch(Nearest(keywords, KEYWORDS_VECTOR), limit, where))
        fused_limit = limit * len(rankings)
        if keep is not None:
            # Every hit the engine returns costs ~13 us of CPU to hand over (half the search at
            # 200): read only what is kept, and a few past it, so that photos tied in score at
            # the cut (two rankings tie in pairs: rank r in one only, rank r in the other only)
            # are still chosen by photo id, as the whole fusion would order them.
            fused_limit = min(fused_limit, keep + _TIE_MARGIN)
        # Equal weights are left to the engine's default: the same fusion as before them.
        weights = None if keyword_weight == 1.0 else (1.0, keyword_weight)[: len(rankings)]
        fused = Search(
            Rrf(k=rrf_k + 1, weights=weights),  # Qdrant's k counts ranks from 0
            fused_limit,
            prefetches=tuple(rankings),
            fields=selection(fields),
            with_vector=with_vectors,
        )
        # Boosted, the formula ranks the whole fusion (its pool), of which it reads as many.
        fused = boosted(fused, boost, limit * len(rankings))
        hits = sorted(self._engine.query(collection, fused), key=lambda h: (-h.score, h.photo_id))
        return hits if keep is None else hits[:keep]

    def recommend(
        self,
        collection: str,
        positive: Sequence[Embeddings],
        negative: Sequence[Embeddings],
        *,
        limit: int,
        offset: int = 0,
        filter: SearchFilter | None = None,
        score_threshold: float | None = None,
        with_vectors: bool = False,
        boost: Boosted | None = None,
        pool: int | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """More like the positive examples and not like the negative ones (Qdrant's
        recommendation query, best-score strategy), best first. `boost`, `pool`, `fields`:
        as search's."""
        if not positive and not negative:
            return []
        examples = Recommend(tuple(dense(v) for v in positive), tuple(dense(v) for v in negative))
        search = Search(
            examples,
            limit,
            offset,
            filter=filters.search_filter(filter),
            score_threshold=score_threshold,
            tuning=self._tuning,
            fields=selection(fields),
            with_vector=with_vectors,
        )
        return self._engine.query(collection, boosted(search, boost, pool))

    def neighbours_each(
        self,
        collection: str,
        vectors: Embeddings,
        *,
        score_threshold: float,
        limit: int,
        exclude_ids: Sequence[str] = (),
        fields: Sequence[str] | None = None,
    ) -> list[list[Hit]]:
        """For each vector of [N, D], its `limit` nearest stored photos at or above the
        threshold (not among exclude_ids), best first; one batched query. A reindex's grouping
        pass (indexer/jobs/regroup.py). fields: the payload fields each hit carries besides
        photo_id (None: its whole payload)."""
        if len(vectors) == 0:
            return []
        where = filters.search_filter(SearchFilter(exclude_ids=tuple(exclude_ids)))
        searches = [
            Search(
                Nearest(row.tolist(), VECTOR_NAME),
                limit,
                filter=where,
                score_threshold=score_threshold,
                tuning=self._tuning,
                fields=selection(fields),
            )
            for row in np.asarray(vectors, dtype=np.float32)
        ]
        return self._engine.query_batch(collection, searches)
