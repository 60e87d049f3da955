"""What a reindex's planners saw: each listed key's source version, by the listing it came from.

A reindex loads the source as it is when each shard is listed; the live side learns of changes
only when a sync or an increment reports them. When the verification before the switch
(indexer/jobs/verify.py) finds the two collections differ on a key, this record says whether
the source explains it: the key's version changed since its listing, or the key was not in
it (written after its shard was listed). Such a difference is repaired by a replay; one the
source does not explain (a photo the new collection lost, a version the source never had)
fails the job.

One Redis hash a job, a field a listing: the shard's range, and its time and each key's
version as digests, sorted by key: 8 bytes of the key's BLAKE2b and 4 of the version's, 12 bytes
a photo (1.1 GiB at 1e8 for the reindex's length; the keys and ETags themselves, compressed,
would take about 46). A digest is all the verification asks: is the key in the listing, is
its version now the listed one. Two keys of a shard sharing 8 bytes (1e-11 for 1e4 keys), or
a changed version its old one's 4 (2e-10), would make a difference look unexplained: a
failed reindex that names the photo, never a wrong switch. A shard listed
again (a catch-up round that replays a shard logged whole) adds a listing; the latest listing
of a key's range speaks for it. A replay of single keys records what it read of each (the
changes only: a field a key). The keys a verification repaired are kept beside them, for
the collection the switch retires: a rollback replays them into it (indexer/jobs/switch.py).
"""

from __future__ import annotations

import json
import struct
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from hashlib import blake2b

import numpy as np
import numpy.typing as npt
from redis import Redis

from indexer.plan.shards import ShardRange

LOOKUP_CHUNK = 64  # listings fetched a request


def key_digest(key: str) -> int:
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little")


def version_digest(version: str) -> int:
    return int.from_bytes(blake2b(version.encode(), digest_size=4).digest(), "little")


@dataclass(frozen=True)
class Listed:
    """A key as its latest listing saw it: its version's digest (None: the range was listed
    without it), when, and the range."""

    version: int | None
    at: float
    lo: str
    hi: str | None

    def saw(self, version: str | None) -> bool:
        """Whether the listing saw this version of the key (None: saw no such key)."""
        if version is None or self.version is None:
            return version is None and self.version is None
        return version_digest(version) == self.version


def pack(versions: Mapping[str, str], at: float) -> bytes:
    """The listing's time, then its keys' digests sorted, then their versions' digests."""
    keys = np.fromiter((key_digest(k) for k in versions), dtype="<u8", count=len(versions))
    vers = np.fromiter(
        (version_digest(v) for v in versions.values()), dtype="<u4", count=len(versions)
    )
    order = np.argsort(keys, kind="stable")
    return struct.pack("<d", at) + keys[order].tobytes() + vers[order].tobytes()


def unpack(blob: bytes) -> tuple[float, npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
    (at,) = struct.unpack_from("<d", blob)
    n = (len(blob) - 8) // 12
    keys = np.frombuffer(blob, dtype="<u8", count=n, offset=8)
    vers = np.frombuffer(blob, dtype="<u4", count=n, offset=8 + 8 * n)
    return at, keys, vers


def _field(shard: ShardRange) -> str:
    return json.dumps([shard.lo, shard.hi])


class Listings:
    """The listings of every reindex, in one Redis, under one prefix."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    def _key(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:listings"

    def _replayed(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:replayed"

    def _repaired(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:repaired"

    def record(
        self, job_id: str, shard: ShardRange, versions: Mapping[str, str], at: float
    ) -> None:
        """The versions one listing of the shard found (a planner run again writes the same)."""
        self.redis.hset(self._key(job_id), _field(shard), pack(versions, at))

    def size(self, job_id: str) -> int:
        """The bytes the job's listings take as stored (their values)."""
        fields: list[bytes] = self.redis.hkeys(self._key(job_id))  # type: ignore[assignment]
        with self.redis.pipeline(transaction=False) as pipe:
            for field in fields:
                pipe.hstrlen(self._key(job_id), field)
            return sum(int(n) for n in pipe.execute())

    def lookup(self, job_id: str, keys: Iterable[str]) -> dict[str, Listed]:
        """Each key that some listing's range covers, as the latest of those saw it."""
        wanted = sorted(set(keys))
        fields: list[bytes] = self.redis.hkeys(self._key(job_id))  # type: ignore[assignment]
        covering: dict[bytes, list[str]] = {}
        for field in fields:
            lo, hi = json.loads(field)
            first = bisect_left(wanted, lo)
            last = len(wanted) if hi is None else bisect_left(wanted, hi)
            if first < last:
                covering[field] = wanted[first:last]
        found: dict[str, Listed] = {}
        names = list(covering)
        for start in range(0, len(names), LOOKUP_CHUNK):
            chunk = names[start : start + LOOKUP_CHUNK]
            blobs: list[bytes | None] = self.redis.hmget(self._key(job_id), chunk)  # type: ignore[assignment]
            for field, blob in zip(chunk, blobs, strict=True):
                if blob is None:
                    continue
                lo, hi = json.loads(field)
                at, digests, versions = unpack(blob)
                for key in covering[field]:
                    seen = found.get(key)
                    if seen is not None and seen.at >= at:
                        continue
                    where = int(np.searchsorted(digests, key_digest(key)))
                    there = where < len(digests) and int(digests[where]) == key_digest(key)
                    version = int(versions[where]) if there else None
                    found[key] = Listed(version, at, lo, hi)
        return found

    def saw(self, job_id: str, versions: Mapping[str, str | None]) -> None:
        """The versions a replay read of single keys (None: gone), the latest kept: the new
        collection may hold one that no listing and no live point has."""
        if versions:
            mapping = {key: json.dumps(version) for key, version in versions.items()}
            self.redis.hset(self._replayed(job_id), mapping=mapping)  # type: ignore[arg-type]

    def replayed(self, job_id: str, keys: Iterable[str]) -> dict[str, str | None]:
        """The version the latest replay of each key read, for the keys a replay read."""
        wanted = list(keys)
        if not wanted:
            return {}
        raw: list[bytes | None] = self.redis.hmget(self._replayed(job_id), wanted)  # type: ignore[assignment]
        return {k: json.loads(v) for k, v in zip(wanted, raw, strict=True) if v is not None}

    def repaired(self, job_id: str, keys: Iterable[str]) -> None:
        """Keep keys a verification repaired (for the collection the switch retires)."""
        listed = list(keys)
        if listed:
            self.redis.sadd(self._repaired(job_id), *listed)

    def repaired_keys(self, job_id: str) -> list[str]:
        found: set[bytes] = self.redis.smembers(self._repaired(job_id))  # type: ignore[assignment]
        return sorted(k.decode() for k in found)

    def forget(self, job_id: str, keep_s: int | None = None) -> None:
        """Drop the job's listings (now, or after keep_s: a failed job may be resumed)."""
        names = (self._key(job_id), self._replayed(job_id), self._repaired(job_id))
        if keep_s is None:
            self.redis.delete(*names)
        else:
            for name in names:
                self.redis.expire(name, keep_s)
