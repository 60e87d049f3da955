"""The vector store, written once over an engine: its searches and writes as neutral requests
(core/vectorstore/engine.py) that Qdrant Edge and a Qdrant server each translate."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from functools import partial

from core.embedding.arrays import Embeddings
from core.vectorstore.base import (
    GROUP_FIELD,
    CollectionInfo,
    CollectionNotFound,
    Hit,
    SearchTuning,
    StoreError,
    model_version_of,
)
from core.vectorstore.engine import Engine
from core.vectorstore.keyword_vectors import fill_keywords
from core.vectorstore.schema import PAYLOAD_INDEXES
from core.vectorstore.store_points import Points
from core.vectorstore.store_searches import Searches


class VectorStore(Points, Searches):
    """What the indexer and the query API need from a vector store, whichever engine holds it:
    its collections and aliases here, its points (store_points.py) and searches
    (store_searches.py) beside. Every method is blocking; the API calls it from a thread pool."""

    def __init__(self, engine: Engine, tuning: SearchTuning) -> None:
        self._engine = engine
        self._tuning = tuning
        # Alias changes and drops are checked, then done: one at a time in this process.
        self._admin = threading.Lock()

    def create_collection(self, name: str, dim: int, *, bulk: bool = False) -> None:
        """Create an empty collection (with its payload indexes); an existing one is kept.

        bulk: it is about to be loaded with every photo: a server defers its search index
        until finish_bulk_load (Qdrant's advice for large uploads)."""
        model_version_of(name)  # only PhotoSearch names: they are also safe folder names
        with self._admin:
            if name in self._engine.aliases():
                raise StoreError(f"{name!r} is an alias")
            found = self._engine.create(name, dim, bulk=bulk, indexes=PAYLOAD_INDEXES)
        if found != dim:
            raise StoreError(f"collection {name!r} has dim {found}, not {dim}")

    def ensure_indexes(self, collection: str) -> None:
        """Create the payload indexes a collection of an older release lacks."""
        name = self.resolve(collection)
        self._engine.create_indexes(name, PAYLOAD_INDEXES)
        if not self._engine.has_keywords(name):
            self._engine.add_keywords(name, partial(fill_keywords, self._engine, name))

    def finish_bulk_load(self, collection: str) -> None:
        """Build the search index of a bulk-loaded collection (a server: in the background)."""
        self._engine.finish_bulk_load(collection)

    def index_ready(self, collection: str) -> bool:
        """Whether the search index is built and every optimization has finished."""
        return self._engine.index_ready(collection)

    def optimize(self, collection: str) -> None:
        """Build the search index now where the engine does not do it in the background."""
        self._engine.optimize(collection)

    def has_collection(self, name: str) -> bool:
        """Whether a collection (not an alias) of that name exists."""
        return name in self._engine.names()

    def drop_collection(self, name: str) -> None:
        """Delete a collection; refused (StoreError) while an alias points at it."""
        with self._admin:
            if name not in self._engine.names():
                raise CollectionNotFound(name)
            aliased = sorted(a for a, target in self._engine.aliases().items() if target == name)
            if aliased:
                raise StoreError(f"collection {name!r} is aliased by {', '.join(aliased)}")
            self._engine.drop(name)

    def collections(self) -> list[CollectionInfo]:
        """All collections, oldest name first."""
        versions: dict[str, int] = {}
        for name in self._engine.names():
            try:
                versions[name] = model_version_of(name)
            except StoreError:
                continue  # a shared server holds other applications' collections too
        aliases = self._engine.aliases()
        infos = []
        for name in sorted(versions, key=lambda n: (versions[n], n)):
            try:
                dim, points = self._engine.dim(name), self._engine.count(name)
            except CollectionNotFound:
                continue  # dropped meanwhile
            aliased = tuple(sorted(a for a, t in aliases.items() if t == name))
            infos.append(CollectionInfo(name, versions[name], dim, points, aliased))
        return infos

    def aliases(self) -> dict[str, str]:
        """Alias -> collection."""
        return self._engine.aliases()

    def set_aliases(self, targets: Mapping[str, str | None]) -> None:
        """Point each alias at a collection (None removes it), all in one atomic step."""
        with self._admin:
            names = self._engine.names()
            for alias, target in targets.items():
                if alias in names:
                    raise StoreError(f"{alias!r} is a collection, not an alias")
                if target is not None and target not in names:
                    raise CollectionNotFound(target)
            self._engine.set_aliases(targets)

    def resolve(self, name: str) -> str:
        """The collection an alias points at, or the collection itself; CollectionNotFound."""
        target = self._engine.aliases().get(name)
        if target is not None:
            return target
        if name in self._engine.names():
            return name
        raise CollectionNotFound(name)

    def close(self) -> None:
        """Flush and release the store."""
        self._engine.close()


def nearest_each(
    store: VectorStore,
    collection: str,
    vectors: Embeddings,
    *,
    score_threshold: float,
    exclude_ids: Sequence[str] = (),
) -> list[Hit | None]:
    """For each vector of [N, D], its nearest stored photo at or above the threshold (not one
    of exclude_ids), or None; one batched query. The indexer's near-duplicate groups."""
    # The grouping reads a neighbour's id and group label only (indexer/photo/duplicates.py).
    found = store.neighbours_each(
        collection,
        vectors,
        score_threshold=score_threshold,
        limit=1,
        exclude_ids=exclude_ids,
        fields=(GROUP_FIELD,),
    )
    return [hits[0] if hits else None for hits in found]
