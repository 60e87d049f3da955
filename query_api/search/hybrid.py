"""A text search by words, or by words and embedding together: the keyword ranking (BM25 over
title, tags and photographer) fused with the vector ranking by reciprocal rank fusion, in one
query of the store where it can (VectorStore.hybrid_search)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from core.embedding.arrays import Embeddings
from core.embedding.manifest import SearchCalibration
from core.keywords import WORD_FIELDS, photo_words, query_vector, words
from core.vectorstore import Hit, KeywordsUnavailable, SparseVector, VectorStore
from core.vectorstore.boosts import CREATED, POPULARITY
from core.vectorstore.engine import Boosted
from query_api.http.errors import ApiError
from query_api.schemas.search import TextSearch
from query_api.search.arrange import Ranking, Read
from query_api.search.boosts import rescored
from query_api.search.ranking import RRF_K, fuse

Mode = Literal["hybrid", "vector", "keyword"]
# What a ranking fused or boosted here reads of each hit's payload, whatever fields its caller
# asked for: the words a `not` description leaves out, and the boosts' fields.
HERE_FIELDS = (*WORD_FIELDS, CREATED, POPULARITY)


@dataclass
class HybridPlan:
    """The rankings a hybrid or keyword search reads; `mode_ran` becomes "vector" when the
    collection has no keyword vectors (a server's collection from before them)."""

    store: VectorStore
    collection: str
    query: TextSearch
    vector: Embeddings | None  # None in keyword mode: no embedding is made
    keywords: SparseVector
    # The words of each `not` description: a photo holding all of one leaves the ranking.
    unwanted: list[frozenset[str]] = field(default_factory=list)
    mode_ran: Mode = "hybrid"
    # The fusion: the collection's model version's calibration, else plain RRF.
    rrf_k: int = RRF_K
    keyword_weight: float = 1.0
    # Business boosts: the fusion (its pool) re-scored by their formula
    # (query_api/search/boosts.py).
    boost: Boosted | None = None

    @classmethod
    def of(
        cls,
        store: VectorStore,
        collection: str,
        query: TextSearch,
        vector: Embeddings | None,
        calibration: SearchCalibration | None = None,
    ) -> HybridPlan:
        keywords = query_vector(query.q)
        if query.mode == "keyword" and not keywords.indices:
            raise ApiError(
                422,
                "the query holds no word to match: mode=keyword leaves out words such as "
                "'a', 'the' and 'of'",
            )
        unwanted = [frozenset(found) for t in query.not_ if (found := words(t))]
        plan = cls(store, collection, query, vector, keywords, unwanted, query.mode)
        if calibration is not None:
            plan.rrf_k, plan.keyword_weight = calibration.rrf_k, calibration.keyword_weight
        return plan

    def fetch(self, read: Read) -> Ranking:
        """The best `read.limit` candidates of each ranking (its offset is 0: a pool), fused,
        and of the fusion its first `read.keep` (None: `limit`); `read.fields`: the payload
        fields the hits need, to which those a fusion here reads are added."""
        limit, with_vectors, keep, fields = read.limit, read.with_vectors, read.kept, read.fields
        if fields is not None:
            fields = (*fields, *HERE_FIELDS)
        if self.query.mode == "keyword":
            by_words, full = self._by_words(keep, with_vectors, pool=limit, fields=fields)
            assert by_words is not None
            return Ranking(by_words, more=full)
        if self.query.score_threshold is None and not self.unwanted:
            return self._fused_by_the_store(limit, with_vectors, keep, fields)
        return self._fused_here(limit, with_vectors, keep, fields)

    def _fused_by_the_store(
        self, limit: int, with_vectors: bool, keep: int, fields: Sequence[str] | None
    ) -> Ranking:
        """Both rankings fused by the engine, in one query; only the first `keep` of the
        fusion are read (each costs CPU to hand over), ranked as the whole fusion ranks."""
        assert self.vector is not None
        try:
            hits = self.store.hybrid_search(
                self.collection,
                self.vector,
                self.keywords,
                limit=limit,
                rrf_k=self.rrf_k,
                keyword_weight=self.keyword_weight,
                filter=self.query.to_store(),
                with_vectors=with_vectors,
                keep=keep,
                boost=self.boost,
                fields=fields,
            )
        except KeywordsUnavailable:
            self.mode_ran = "vector"
            hits = self._by_vector(keep, with_vectors, pool=limit, fields=fields)
            return Ranking(hits, more=len(hits) == keep)
        # The fusion holds up to twice `limit`: all `keep` read means more may follow.
        return Ranking(hits, more=len(hits) >= keep)

    def _fused_here(
        self, limit: int, with_vectors: bool, keep: int, fields: Sequence[str] | None
    ) -> Ranking:
        """Both rankings read, then fused here. The engine's fusion cannot serve these two
        cases with the same results: the threshold is a cosine similarity that a keyword
        match must reach too (a prefetch's threshold would cut the keyword ranking by its
        own BM25 scores), and a `not` description takes out of the keyword ranking the photos
        holding all of its words (core.keywords' words of the payload's text: no filter of
        the engine matches them)."""
        assert self.vector is not None
        threshold = self.query.score_threshold
        by_words, full = self._by_words(limit, with_vectors or threshold is not None, fields=fields)
        by_vector = self._by_vector(limit, with_vectors, fields=fields)
        if by_words is None:
            self.mode_ran = "vector"
            by_vector = rescored(by_vector, self.boost)
            return Ranking(by_vector[:keep], more=len(by_vector) == limit or len(by_vector) > keep)
        if threshold is not None:  # the threshold is a cosine similarity: the words' too
            query = np.asarray(self.vector, dtype=np.float32)
            by_words = [h for h in by_words if _cosine(h.vector, query) >= threshold]
        fused = fuse([by_vector, by_words], self.rrf_k, [1.0, self.keyword_weight])
        # Fused here, boosted here: the store's formula, evaluated in Python.
        fused = rescored(fused, self.boost)
        more = full or len(by_vector) == limit or len(fused) > keep
        return Ranking(fused[:keep], more=more)

    def _by_vector(
        self,
        limit: int,
        with_vectors: bool,
        pool: int | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """The vector ranking; boosted (pool: see _by_words) only when it is all there is."""
        assert self.vector is not None
        return self.store.search(
            self.collection,
            self.vector,
            limit=limit,
            filter=self.query.to_store(),
            score_threshold=self.query.score_threshold,
            with_vectors=with_vectors,
            boost=None if pool is None else self.boost,
            pool=pool,
            fields=fields,
        )

    def _by_words(
        self,
        limit: int,
        with_vectors: bool,
        pool: int | None = None,
        fields: Sequence[str] | None = None,
    ) -> tuple[list[Hit] | None, bool]:
        """The keyword ranking (None: the collection has none) and whether it was full;
        `pool`: the ranking is the search's own (mode=keyword), its best `pool` boosted
        (None: unboosted, a side of a fusion)."""
        if not self.keywords.indices:
            return [], False
        try:
            hits = self.store.keyword_search(
                self.collection,
                self.keywords,
                limit=limit,
                filter=self.query.to_store(),
                with_vectors=with_vectors,
                boost=None if pool is None else self.boost,
                pool=pool,
                fields=fields,
            )
        except KeywordsUnavailable:
            if self.query.mode == "keyword":
                raise ApiError(
                    409,
                    f"{self.collection} was built before keyword search: a reindex "
                    "(photosearch index reindex) gives it keywords; until then use "
                    "mode=vector or hybrid",
                ) from None
            return None, False
        full = len(hits) == limit
        if self.unwanted:
            hits = [h for h in hits if not self._unwanted(h)]
        return hits, full

    def _unwanted(self, hit: Hit) -> bool:
        held = set(photo_words(hit.payload))
        return any(unwanted <= held for unwanted in self.unwanted)


def _cosine(vector: Embeddings | None, query: Embeddings) -> float:
    # Stored and query vectors are unit length: the dot product is the cosine.
    return -1.0 if vector is None else float(np.dot(vector, query))
