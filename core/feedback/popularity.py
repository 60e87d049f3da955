"""Each photo's popularity from the search feedback events, kept in Redis for the indexer's join."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from redis import Redis

from core.feedback.events import StoredEvent, read_events

# What one event is worth: a download is a sale's intent, an open a look.
WEIGHTS: dict[str, float] = {"opened": 1.0, "downloaded": 5.0}


def popularity_of(events: Iterable[StoredEvent]) -> dict[str, float]:
    """Photo id -> opens + 5 x downloads among the events (skips count nothing)."""
    counts: dict[str, float] = {}
    for event in events:
        counts[event.photo_id] = counts.get(event.photo_id, 0.0) + WEIGHTS.get(event.action, 0.0)
    return {photo_id: value for photo_id, value in counts.items() if value > 0}


def popularity_key(prefix: str) -> str:
    return f"{prefix}:popularity"


def pending_key(prefix: str) -> str:
    """The ids of photos whose popularity changed, until an increment plans them."""
    return f"{prefix}:popularity:pending"


class Popularity:
    """The popularity the indexer joins into each photo's metadata: photo id -> value, in the
    persistent Redis. A photo once popular keeps an entry (0 when its events expired), so the
    join writes its 0 over the value stored before."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis, self.prefix = redis, prefix

    def lookup(self, photo_ids: Sequence[str]) -> dict[str, float]:
        """The values of those photos that have one."""
        if not photo_ids:
            return {}
        found = self.redis.hmget(popularity_key(self.prefix), list(photo_ids))
        return {pid: float(v) for pid, v in zip(photo_ids, found, strict=True) if v is not None}

    def replace(self, values: Mapping[str, float]) -> list[str]:
        """Make these the values (photos not among them: 0); the photo ids whose value
        changed, in order."""
        key = popularity_key(self.prefix)
        stored: dict[bytes, bytes] = self.redis.hgetall(key)  # type: ignore[assignment]
        before = {k.decode(): float(v) for k, v in stored.items()}
        after = dict.fromkeys(before, 0.0) | {pid: float(v) for pid, v in values.items()}
        changed = sorted(pid for pid, v in after.items() if before.get(pid) != v)
        if changed:
            self.redis.hset(key, mapping={pid: repr(after[pid]) for pid in changed})
        return changed

    def mark_pending(self, photo_ids: Iterable[str]) -> None:
        """Photos for the next increment to plan (their payload takes the new values)."""
        found = list(photo_ids)
        if found:
            self.redis.sadd(pending_key(self.prefix), *found)

    def take_pending(self) -> list[str]:
        """The photo ids waiting, removed: an increment plans them now."""
        taken = self.redis.spop(pending_key(self.prefix), 1_000_000)
        return sorted(k.decode() for k in taken or [])  # type: ignore[union-attr]


@dataclass(frozen=True)
class Refreshed:
    """What a refresh counted: events read, photos with a popularity, the photos changed."""

    events: int
    photos: int
    changed: list[str]


def refresh(redis: Redis, prefix: str, *, since: float, now: float, retention_s: int) -> Refreshed:
    """Popularity counted anew from the events since `since` (within the retention at `now`),
    kept, and the photos whose value changed marked for the next increment (`photosearch
    feedback popularity`, and beat's daily task)."""
    events = list(read_events(redis, prefix, since=since, now=now, retention_s=retention_s))
    values = popularity_of(events)
    popularity = Popularity(redis, prefix)
    changed = popularity.replace(values)
    popularity.mark_pending(changed)
    return Refreshed(len(events), len(values), changed)
