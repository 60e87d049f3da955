"""The four kinds of search, each the part of the one pipeline (pipeline.py) that is its own: how
it gets its ranking of a collection and the stages it adds to `Server-Timing`.

text: the query's embedding (cache, then admit, tokenize, embed), ranked by vector, or fused
with the keyword ranking; image: the upload read or fetched (fetch), decoded and embedded (admit,
decode, embed); more like this and recommend: the stored vectors of photos (retrieve).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar, Self

import numpy as np

from core.embedding.arrays import Embeddings
from core.feedback.searchlog import Kind
from core.querycache import normalize_query
from core.vectorstore import model_version_of
from core.vectorstore.engine import Boosted
from query_api.http.errors import ApiError
from query_api.http.timing import Stages
from query_api.schemas.search import RecommendSearch, TextSearch
from query_api.search.embed import ImageEmbedder, QueryEmbedder
from query_api.search.experiment import Draw, Experiments
from query_api.search.hybrid import HybridPlan
from query_api.search.pipeline import Query, SearchKind, SearchParts, nearest_fetch, ranked
from query_api.services import StoreCalls


@dataclass(frozen=True)
class TextKind(SearchKind):
    """A text query, ranked by its embedding, by its words, or by both fused. `reveal_cache`:
    say whether the embedding came from the cache. Only to an operator (an admin key): to
    anyone else it would tell whether some other caller searched the phrase."""

    page: TextSearch
    queries: QueryEmbedder
    reveal_cache: bool = False
    name: ClassVar[Kind] = "text"

    @property
    def embeddings(self) -> int:
        return text_embeddings(self.page)

    @property
    def pooled(self) -> bool:
        return self.page.mode != "vector"

    @property
    def logged(self) -> str | None:
        return self.page.q

    async def draw(self, experiments: Experiments, session: str | None) -> Draw | None:
        return await experiments.draw(self.page, session)

    async def query(self, collection: str, boost: Boosted | None, parts: SearchParts) -> Query:
        query, queries, store = self.page, self.queries, parts.calls.store
        vector, cached, calibration = None, True, None
        if query.mode != "keyword":
            version = model_version_of(collection)
            vector, cached = await _query_vector(queries, query, version, parts.stages)
            calibration = queries.calibration(version)
        reveal = cached if self.reveal_cache and query.mode != "keyword" else None
        if query.mode == "vector":
            assert vector is not None
            fetch = nearest_fetch(store, collection, vector, query, (), boost)
            return Query(fetch, reveal, lambda: "vector")
        plan = HybridPlan.of(store, collection, query, vector, calibration)
        plan.boost = boost
        return Query(plan.fetch, reveal, lambda: plan.mode_ran)


def text_embeddings(query: TextSearch) -> int:
    """How many embeddings a text search makes: none by words alone; the query's, and each
    distinct `not` text's when they move it (its price: query_api.http.ratelimit.price)."""
    if query.mode == "keyword":
        return 0
    if not query.not_ or query.not_weight == 0:
        return 1
    return len(dict.fromkeys(normalize_query(t) for t in [query.q, *query.not_]))


async def _query_vector(
    queries: QueryEmbedder, query: TextSearch, version: int, stages: Stages
) -> tuple[Embeddings, bool]:
    """The query's embedding, moved away from its `not` descriptions: q - w x mean(not),
    unit length again (as Marqo's negative weights and rclip's "-" do)."""
    normalized = normalize_query(query.q)
    if not query.not_ or query.not_weight == 0:
        return await queries.embed(normalized, version, stages)
    texts = [normalized, *dict.fromkeys(normalize_query(t) for t in query.not_)]
    each = [Stages() for _ in texts]
    embedded = await asyncio.gather(
        *(queries.embed(t, version, st) for t, st in zip(texts, each, strict=True))
    )
    stages.overlapped(each)
    vectors = np.stack([np.asarray(v, dtype=np.float32) for v, _ in embedded])
    moved = vectors[0] - query.not_weight * vectors[1:].mean(axis=0)
    norm = float(np.linalg.norm(moved))
    if norm < 1e-6:  # the query is its own `not`: nothing is left to search for
        raise ApiError(422, "the query and its `not` descriptions cancel each other out")
    return (moved / norm).astype(np.float32), all(c for _, c in embedded)


@dataclass(frozen=True)
class ImageKind(SearchKind):
    """Photos that look like an image: `read` gives the upload's bytes or the URL to fetch
    them from with `download`, once the search is paid for (an image's embedding is never
    cached: it always costs one)."""

    embedder: ImageEmbedder
    read: Callable[[], Awaitable[bytes | str]]
    download: Callable[[str], Awaitable[bytes]]
    data: bytes = b""
    name: ClassVar[Kind] = "image"

    @property
    def embeddings(self) -> int:
        return 1

    async def prepared(self, stages: Stages) -> Self:
        data = await self.read()
        if isinstance(data, str):
            with stages.timed("fetch"):
                data = await self.download(data)
        return replace(self, data=data)

    async def query(self, collection: str, boost: Boosted | None, parts: SearchParts) -> Query:
        vector = await self.embedder.embed(self.data, model_version_of(collection), parts.stages)
        return Query(nearest_fetch(parts.calls.store, collection, vector, self.page, (), boost))


@dataclass(frozen=True)
class SimilarKind(SearchKind):
    """More like this: the stored vector of a photo, not a new embedding; never itself."""

    photo_id: str
    name: ClassVar[Kind] = "similar"

    @property
    def exclude(self) -> tuple[str, ...]:
        return (self.photo_id,)

    async def query(self, collection: str, boost: Boosted | None, parts: SearchParts) -> Query:
        (vector,) = await stored_vectors(parts.calls, collection, [self.photo_id], parts.stages)
        store = parts.calls.store
        return Query(nearest_fetch(store, collection, vector, self.page, self.exclude, boost))


@dataclass(frozen=True)
class RecommendKind(SearchKind):
    """More like these and not like those: the store's recommendation query over the stored
    vectors of the examples, none of which is a result."""

    page: RecommendSearch
    name: ClassVar[Kind] = "recommend"

    @property
    def exclude(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.page.positive, *self.page.negative]))

    async def query(self, collection: str, boost: Boosted | None, parts: SearchParts) -> Query:
        query, examples = self.page, self.exclude
        vectors = await stored_vectors(parts.calls, collection, list(examples), parts.stages)
        by_id = dict(zip(examples, vectors, strict=True))
        positive = [by_id[p] for p in dict.fromkeys(query.positive)]
        negative = [by_id[n] for n in dict.fromkeys(query.negative) if n not in query.positive]
        rank = partial(parts.calls.store.recommend, collection, positive, negative)
        return Query(ranked(rank, query, examples, boost))


async def stored_vectors(
    calls: StoreCalls, collection: str, photo_ids: list[str], stages: Stages
) -> list[Embeddings]:
    """The stored vectors of photos, in the order asked; 404 names a photo not indexed."""
    store = calls.store
    with stages.timed("retrieve"):
        found = await calls.run(
            "retrieve", lambda: store.retrieve(collection, photo_ids, with_vectors=True)
        )
    vectors = {record.photo_id: record.vector for record in found}
    for photo_id in photo_ids:
        if vectors.get(photo_id) is None:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
    return [v for pid in dict.fromkeys(photo_ids) if (v := vectors[pid]) is not None]
