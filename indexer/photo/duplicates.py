"""Near-duplicate groups: a photo written joins its nearest neighbour's group, or starts one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding.arrays import Embeddings
from core.vectorstore import GROUP_FIELD, Hit, VectorStore, nearest_each

# Members of a group relabelled per request when the photo that named it leaves (far more
# than the up-to-64 photos of a batch, which are left out of every page).
RELABEL_PAGE = 1000


@dataclass(frozen=True)
class Neighbour:
    """The photo a new photo is a near-duplicate of: stored (photo id and label) or earlier
    in the same batch (its row)."""

    score: float
    row: int | None = None  # an earlier photo of the batch
    hit: Hit | None = None  # a stored photo


@dataclass(frozen=True)
class Grouping:
    """Each photo's group label, in batch order, and what the store needs besides."""

    labels: list[str]
    # Stored neighbours written before groups existed: their label is their own photo id,
    # which the store does not hold yet.
    unlabelled: list[str]
    # Photos that start a group of their own (no neighbour, or only later ones of the batch):
    # their id may still name an old group they were in before their content changed.
    founders: list[str]


def earlier_neighbours(vectors: Embeddings, threshold: float) -> list[tuple[int, float] | None]:
    """For each row of [N, D] unit vectors, the most similar earlier row (row, cosine) at or
    above the threshold, or None: a batch is grouped in its own order."""
    n = len(vectors)
    if n == 0:
        return []
    cosines = np.asarray(vectors, dtype=np.float32) @ np.asarray(vectors, dtype=np.float32).T
    # Only earlier rows count: the diagonal and everything after it are out.
    cosines[np.triu_indices(n)] = -np.inf
    best = np.argmax(cosines, axis=1)
    scores = cosines[np.arange(n), best]
    return [
        (int(row), float(score)) if score >= threshold else None
        for row, score in zip(best, scores, strict=True)
    ]


def label_of(hit: Hit) -> str:
    """A stored photo's group: its label, or its own id where it has none yet."""
    group = hit.payload.get(GROUP_FIELD)
    return str(group) if group else hit.photo_id


def assign(
    photo_ids: Sequence[str],
    vectors: Embeddings,
    stored: Sequence[Hit | None],
    threshold: float,
) -> Grouping:
    """Greedy grouping of one batch, given each photo's nearest stored photo at or above the
    threshold (stored[i], or None): a photo takes the group of whichever is more similar,
    that stored photo or the batch's most similar earlier photo (a tie goes to the stored
    one, whose group is there already); with neither it starts a group named by its own id."""
    if not len(photo_ids) == len(vectors) == len(stored):
        raise ValueError("photo_ids, vectors and stored differ in length")
    labels: list[str] = []
    unlabelled: dict[str, None] = {}
    founders: list[str] = []
    for photo_id, hit, earlier in zip(
        photo_ids, stored, earlier_neighbours(vectors, threshold), strict=True
    ):
        if hit is not None and (earlier is None or hit.score >= earlier[1]):
            labels.append(label_of(hit))
            if not hit.payload.get(GROUP_FIELD):
                unlabelled[hit.photo_id] = None
        elif earlier is not None:
            labels.append(labels[earlier[0]])
        else:
            labels.append(photo_id)
            founders.append(photo_id)
    return Grouping(labels, list(unlabelled), founders)


def assign_groups(
    store: VectorStore,
    collection: str,
    photo_ids: Sequence[str],
    vectors: Embeddings,
    threshold: float,
) -> list[str]:
    """The group label of each photo about to be written (in order), after labelling what the
    store needs for it. Run before the batch's upsert; running it again (a retried batch) finds
    the same groups, since the batch's own points are left out of the search."""
    stored = nearest_each(
        store, collection, vectors, score_threshold=threshold, exclude_ids=photo_ids
    )
    grouping = assign(photo_ids, vectors, stored, threshold)
    for photo_id in grouping.unlabelled:
        store.set_group(collection, photo_id, [photo_id])
    release_old_groups(store, collection, grouping.founders, set(photo_ids))
    return grouping.labels


def release_old_groups(
    store: VectorStore, collection: str, founders: Sequence[str], batch: set[str]
) -> None:
    """A photo that starts a group is labelled with its id; if that id still names the group
    it was in before its content changed, the rest of that group (not similar to it, or it
    would have joined them) moves to a label of its own: the smallest id among them."""
    pending = list(founders)
    moved_to: dict[str, str] = {}
    while pending:
        pages = store.group_members(collection, pending, limit_each=RELABEL_PAGE)
        pending = []
        for group, members in pages.items():
            others = [photo_id for photo_id in members if photo_id not in batch]
            if not others:
                continue
            # Pages are in photo id order, so the first page's first is the group's smallest.
            store.set_group(collection, moved_to.setdefault(group, others[0]), others)
            if len(members) == RELABEL_PAGE:  # more may follow: the moved ones have left
                pending.append(group)
