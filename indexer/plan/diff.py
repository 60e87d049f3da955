"""The diff of one shard: its listing against the points labelled with it, photo by photo.

The listing (bounded by the shard size) is held; the shard's points stream past it, so what
a diff holds is one shard's listing whatever the number of points. A listed photo with no
point in its shard may still have one elsewhere in the collection (it moved from another
shard, or another photo uses its id): the planner looks those up by id and `resolve` says
what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from core.vectorstore import IndexedPoint
from indexer.photo.skips import Skipped
from indexer.plan.catalog import Catalog, Photo


class Action(StrEnum):
    EMBED = "embed"  # new, or a new version of its file
    # The same file: its metadata, key, shard label or automatic tags' vocabulary changed.
    PAYLOAD = "payload"
    UNCHANGED = "unchanged"
    KNOWN_BAD = "known_bad"  # failed before at this very version: not retried


def classify(
    photo: Photo,
    point: IndexedPoint | None,
    label: str,
    bad_version: str | None,
    tagging: str | None = None,
) -> Action:
    """What a listed photo needs, given its stored point (if any). `tagging`: the key of the
    automatic tags the collection's model version makes now (indexer/photo/autotags.py); a point
    tagged with another is re-tagged from its stored vector (None: not compared)."""
    if point is not None and point.content_version == photo.version:
        same = point.meta_hash == photo.meta_hash and point.key == photo.key
        tagged = tagging is None or point.auto_tags_vocabulary == tagging
        return Action.UNCHANGED if same and tagged and point.shard == label else Action.PAYLOAD
    if bad_version == photo.version:
        # A bad new file leaves the point of the old one in place until it is fixed.
        return Action.KNOWN_BAD
    return Action.EMBED


def resolve(
    photo: Photo,
    found: IndexedPoint | None,
    label: str,
    bad_version: str | None,
    other_there: bool,
    tagging: str | None = None,
) -> Action | None:
    """A listed photo whose id has no point in its shard; `found` is the id's point elsewhere,
    `other_there` whether that point's file is still in the source. None: another photo
    keeps the id (the smaller key wins, so both shards agree which)."""
    if found is not None and found.key != photo.key and other_there and found.key < photo.key:
        return None
    return classify(photo, found, label, bad_version, tagging)


@dataclass
class ShardPlan:
    """What one shard's planning does to bring the collection level with the source."""

    embed: list[Photo] = field(default_factory=list)
    payload: list[Photo] = field(default_factory=list)
    unchanged: int = 0
    known_bad: int = 0
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)  # newly seen non-photos
    forget: list[str] = field(default_factory=list)  # skip records of files that are gone
    unmatched: list[Photo] = field(default_factory=list)  # no point in this shard: look up

    def add(self, photo: Photo, action: Action) -> None:
        if action == Action.EMBED:
            self.embed.append(photo)
        elif action == Action.PAYLOAD:
            self.payload.append(photo)
        elif action == Action.UNCHANGED:
            self.unchanged += 1
        else:
            self.known_bad += 1


class ShardDiff:
    """Feed it the shard's points one by one (see), then take the plan (finish)."""

    def __init__(
        self, catalog: Catalog, skipped: Skipped, label: str, tagging: str | None = None
    ) -> None:
        self.catalog = catalog
        self.skipped = skipped
        self.label = label
        self.tagging = tagging
        self.plan = ShardPlan()
        self._seen: set[str] = set()

    def bad_version(self, key: str) -> str | None:
        record = self.skipped.get(key)
        return record[0] if record else None

    def see(self, point: IndexedPoint) -> bool:
        """Compare one point of the shard; True when its photo is gone from the shard."""
        photo = self.catalog.photos.get(point.photo_id)
        if photo is None:
            return True
        self._seen.add(point.photo_id)
        bad = self.bad_version(photo.key)
        self.plan.add(photo, classify(photo, point, self.label, bad, self.tagging))
        return False

    def finish(self) -> ShardPlan:
        plan = self.plan
        plan.unmatched = [p for pid, p in self.catalog.photos.items() if pid not in self._seen]
        for key, (version, reason) in self.catalog.rejected.items():
            if self.bad_version(key) == version:
                plan.known_bad += 1
            else:
                plan.rejected[key] = (version, reason)
        listed = {p.key for p in self.catalog.photos.values()} | self.catalog.rejected.keys()
        plan.forget = [key for key in self.skipped if key not in listed]
        return plan
