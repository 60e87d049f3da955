"""A reindex's grouping pass: near-duplicate groups over its whole new collection, shard by
shard, once the search index is built.

The load groups each batch within itself only: a collection without a search index (a Qdrant
server's bulk load, Qdrant Edge before optimize) answers each batch's search by scanning every
point written so far, O(N^2) over 1e8 photos. This pass searches the built index instead.

The rule is a function of the embeddings alone, so that shards are grouped in parallel and in
any order, and a pass run again finds the same groups. A photo's *earlier neighbour* is the
most similar photo at or above the threshold, then the smallest id, among its NEIGHBOURS
nearest whose photo id sorts before its own. Its group is named by the end of the chain of
earlier neighbours that starts at it: a photo without one names its own group. That is the
grouping of a sync that wrote the photos one at a time in photo id order (each joining its
nearest stored photo's group, indexer/photo/duplicates.py), as a sync of a new folder in one batch
does. A photo with more than NEIGHBOURS near-duplicates that sort after it and are more
similar to it than any before it is taken for the first of its group.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from core.jobstatus import JobStatus
from core.vectorstore import GROUP_FIELD, Hit, StoredPhoto, VectorStore
from indexer.plan.planner import Planned, chunks
from indexer.plan.shards import ShardMap, ShardRange
from indexer.queue.messages import GroupUnit

log = logging.getLogger(__name__)

# Nearest photos read per photo: its earlier neighbour is the best of them that sorts before
# it. Near-duplicate groups are a few photos; the search walks its ef candidates anyway.
NEIGHBOURS = 16
# Photos per batched search (and per page of the shard's points read with their vectors).
PAGE = 256
# The payload the rule reads: of a neighbour its photo id alone (which every read carries),
# of a shard's own photos their group label besides, to write only the labels that change.
# At 1e8 photos the pass reads 1.7e9 neighbours: their other fields would be read for nothing.
HIT_FIELDS: tuple[str, ...] = ()
PHOTO_FIELDS = (GROUP_FIELD,)


def group_units(shards: ShardMap) -> list[GroupUnit]:
    """Every shard of the grouping pass, as the units of its round (planned by plan tokens)."""
    return [GroupUnit(shard) for shard in shards.ranges()]


def earlier_neighbour(photo_id: str, hits: Iterable[Hit]) -> str | None:
    """The most similar of the hits (then the smallest id) whose id sorts before photo_id."""
    earlier = [hit for hit in hits if hit.photo_id < photo_id]
    if not earlier:
        return None
    return min(earlier, key=lambda hit: (-hit.score, hit.photo_id)).photo_id


class Chains:
    """Each photo's earlier neighbour, searched for as the chains of a shard's photos need."""

    def __init__(
        self,
        store: VectorStore,
        collection: str,
        threshold: float,
        searched: Callable[[], None] = lambda: None,
    ) -> None:
        self.store, self.collection, self.threshold = store, collection, threshold
        self.searched = searched
        self.earlier: dict[str, str | None] = {}

    def groups(self, photos: Sequence[StoredPhoto]) -> dict[str, str]:
        """The group of each photo (read with its vector): the end of its chain."""
        self._search(photos)
        while True:
            # Chains leave the page, or the shard: the photos they reach are searched for too,
            # a step at a time (ids decrease along a chain, so it ends).
            unknown = {end for p in photos if (end := self._end(p.photo_id)) not in self.earlier}
            if not unknown:
                break
            found = self.store.retrieve(
                self.collection, sorted(unknown), with_vectors=True, fields=PHOTO_FIELDS
            )
            for gone in unknown - {p.photo_id for p in found}:
                self.earlier[gone] = None  # deleted meanwhile: the chain ends there
            self._search(found)
        return {p.photo_id: self._end(p.photo_id) for p in photos}

    def _end(self, photo_id: str) -> str:
        """Along the earlier neighbours known: the chain's end, or the first one not known."""
        while (step := self.earlier.get(photo_id)) is not None:
            photo_id = step
        return photo_id

    def _search(self, photos: Sequence[StoredPhoto]) -> None:
        todo = [p for p in photos if p.photo_id not in self.earlier]
        for page in chunks(todo, PAGE):
            vectors = np.stack([np.asarray(p.vector, dtype=np.float32) for p in page])
            # One more than NEIGHBOURS: the photo itself is among them, and leaves by its id.
            found = self.store.neighbours_each(
                self.collection,
                vectors,
                score_threshold=self.threshold,
                limit=NEIGHBOURS + 1,
                fields=HIT_FIELDS,
            )
            self.searched()
            for photo, hits in zip(page, found, strict=True):
                self.earlier[photo.photo_id] = earlier_neighbour(photo.photo_id, hits)


@dataclass(frozen=True)
class Regrouped:
    """A shard's pass: its photos, and those whose group label it changed."""

    photos: int
    moved: int


def regroup_shard(
    store: VectorStore,
    collection: str,
    label: str,
    threshold: float,
    searched: Callable[[], None] = lambda: None,
) -> Regrouped:
    """Label every photo of one shard with its group by the rule above; only changed labels
    are written. searched: called after each batched search."""
    chains = Chains(store, collection, threshold, searched)
    photos = moved = 0
    for stored in store.shard_vectors(collection, label, fields=PHOTO_FIELDS, page=PAGE):
        groups = chains.groups(stored)
        moves: dict[str, list[str]] = defaultdict(list)
        for photo in stored:
            group = groups[photo.photo_id]
            if photo.payload.get(GROUP_FIELD) != group:
                moves[group].append(photo.photo_id)
        for group, members in moves.items():
            store.set_group(collection, group, members)
        photos += len(stored)
        moved += sum(len(members) for members in moves.values())
    return Regrouped(photos, moved)


def group_shard(
    job: JobStatus,
    shard: ShardRange,
    *,
    store: VectorStore,
    duplicate_threshold: float,
    worker: str,
    on_search: Callable[[], None] = lambda: None,
    now: Callable[[], float] = time.time,
) -> Planned:
    """The grouping pass over one shard of a reindex's collection, as the plan task commits
    it: a record of the shard, and the photos moved to another group. `on_search` counts the
    store's neighbour searches."""
    started = now()
    result = regroup_shard(store, job.collection, shard.lo, duplicate_threshold, on_search)
    log.info(
        "grouping pass of %s, shard %r: %d photos, %d moved to another group",
        job.collection,
        shard.lo,
        result.photos,
        result.moved,
    )
    record = {
        "label": shard.lo,
        "hi": shard.hi,
        "photos": result.photos,
        "regrouped": result.moved,
        "worker": worker,
        "started": started,
        "finished": now(),
    }
    return Planned(record, counts={"regrouped": result.moved})
