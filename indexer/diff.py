"""The sync's diff: the catalog against what a collection holds, by identity and version."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from indexer.catalog import Catalog, Photo
from photosearch.vectorstore import IndexedVersion


@dataclass
class SyncPlan:
    """What one sync does to bring a collection level with its source."""

    embed: list[Photo] = field(default_factory=list)  # new and changed files
    payload_only: list[Photo] = field(default_factory=list)  # same file, new metadata
    gone: list[str] = field(default_factory=list)  # photo ids to delete
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)  # newly seen non-photos
    forget: list[str] = field(default_factory=list)  # skip records of files that are gone
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    known_bad: int = 0  # skipped before at this same version: not retried


def plan_sync(
    catalog: Catalog, indexed: Iterable[IndexedVersion], skipped: Mapping[str, str]
) -> SyncPlan:
    """Compare; `skipped` maps the ids recorded as bad to the version that was bad."""
    plan = SyncPlan()
    seen: set[str] = set()
    for stored in indexed:
        seen.add(stored.photo_id)
        photo = catalog.photos.get(stored.photo_id)
        if photo is None:
            plan.gone.append(stored.photo_id)
        elif photo.version != stored.content_version:
            if skipped.get(photo.photo_id) == photo.version:
                # The new file is bad; the point of the old one stays until it is fixed.
                plan.known_bad += 1
                continue
            plan.embed.append(photo)
            plan.changed += 1
        elif photo.meta_hash != stored.meta_hash:
            plan.payload_only.append(photo)
        else:
            plan.unchanged += 1
    for photo_id, photo in catalog.photos.items():
        if photo_id in seen:
            continue
        if skipped.get(photo_id) == photo.version:
            plan.known_bad += 1
        else:
            plan.embed.append(photo)
            plan.new += 1
    for key, (version, reason) in catalog.rejected.items():
        if skipped.get(key) == version:
            plan.known_bad += 1
        else:
            plan.rejected[key] = (version, reason)
    plan.forget = [
        photo_id
        for photo_id in skipped
        if photo_id not in catalog.photos and photo_id not in catalog.rejected
    ]
    return plan
