"""Change capture: the keys the live side changes, logged for the collections that follow it.

A reindex's new collection follows the live one from the reindex's start to its switch; after
a switch, the previous collection follows it for rollback_days. Every key a sync or increment
of the live collection plans a change for (embed, payload, delete, a skipped photo) goes into
each follower's log, in one Redis script. A follower catches up by *replaying* its log: each
key is planned against the follower as an increment plans a reported key (indexer/plan/increment.py:
the source's state now, the point looked up by key), so a replay costs the changes, never the
catalogue, and a key changed ten times is replayed once.

Why a log of keys rather than writing each change to the follower at once: the follower is
embedded by another model (its own Triton version), and during a reindex's load its shards are
not written yet; a key replayed reads the source as it is then, so events that arrive late,
twice or out of order change nothing.

The log is bounded per shard: a shard (of the live collection's map) whose logged keys pass
`capture_shard_keys` is logged as the whole shard instead, and replayed by planning that
shard's range in the follower (a listing of one shard, which costs less than stating more keys
than that). Redis's clock stamps each entry, so a replay takes the entries up to a cut and
removes only those: a key changed again during the replay stays for the next one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from redis import Redis

from indexer.plan.shards import ShardMap, ShardRange

# KEYS: 1 followers. ARGV: prefix, per-shard bound, lo, hi (json), key...
# Returns the Redis time (µs) it was logged at.
_CAPTURE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local followers = redis.call('HGETALL', KEYS[1])
local lo = ARGV[3]
for i = 1, #followers, 2 do
  local untl = tonumber(followers[i + 1])
  if untl == 0 or untl * 1000000 > now then
    local base = ARGV[1] .. ':capture:' .. followers[i]
    redis.call('ZADD', base .. ':first', 'NX', now, lo)
    redis.call('ZADD', base .. ':labels', now, lo)
    if redis.call('HEXISTS', base .. ':whole', lo) == 0 then
      local log = base .. ':keys:' .. lo
      for j = 5, #ARGV do redis.call('ZADD', log, now, ARGV[j]) end
      if redis.call('ZCARD', log) > tonumber(ARGV[2]) then
        redis.call('DEL', log)
        redis.call('HSET', base .. ':whole', lo, ARGV[4])
      end
    end
  end
end
return tostring(now)
"""

# KEYS: 1 labels, 2 first, 3 whole. ARGV: base, cut (µs). Removes what a replay up to cut
# carried; a label changed after the cut stays.
_TRIM = """
for _, lo in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])) do
  redis.call('DEL', ARGV[1] .. ':keys:' .. lo)
  redis.call('HDEL', KEYS[3], lo)
  redis.call('ZREM', KEYS[1], lo)
  redis.call('ZREM', KEYS[2], lo)
end
for _, lo in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')) do
  local log = ARGV[1] .. ':keys:' .. lo
  redis.call('ZREMRANGEBYSCORE', log, '-inf', ARGV[2])
  -- Its first entry now is the oldest one waiting.
  local first = redis.call('ZRANGE', log, 0, 0, 'WITHSCORES')
  if first[2] then redis.call('ZADD', KEYS[2], first[2], lo) end
end
return 1
"""


@dataclass(frozen=True)
class Lag:
    """What a follower has not replayed yet: keys waiting, whole shards waiting, and the Redis
    time (s) of the oldest change among them (None when nothing waits)."""

    keys: int
    shards: int
    oldest_at: float | None

    @property
    def waiting(self) -> int:
        return self.keys + self.shards


@dataclass(frozen=True)
class Replay:
    """A follower's log up to a cut: keys to plan, and whole shard ranges to plan again."""

    cut: int
    keys: list[str]
    shards: list[ShardRange]


class ChangeLog:
    """The followers of the live collection and their logs, in one Redis."""

    def __init__(self, redis: Redis, prefix: str, shard_keys: int = 5000) -> None:
        self.redis = redis
        self.prefix = prefix
        self.shard_keys = shard_keys
        self._followers = f"{prefix}:followers"
        self._capture = redis.register_script(_CAPTURE)
        self._trim = redis.register_script(_TRIM)

    def _base(self, collection: str) -> str:
        return f"{self.prefix}:capture:{collection}"

    def follow(self, collection: str, until: float = 0.0) -> None:
        """Log the live side's changes for the collection from now (until that time; 0: until
        told to stop)."""
        self.redis.hset(self._followers, collection, str(until))

    def unfollow(self, collection: str) -> None:
        """Stop logging for the collection and forget its log."""
        self.redis.hdel(self._followers, collection)
        base = self._base(collection)
        labels: list[bytes] = self.redis.zrange(f"{base}:labels", 0, -1)  # type: ignore[assignment]
        keys = [f"{base}:keys:{lo.decode()}" for lo in labels]
        self.redis.delete(f"{base}:labels", f"{base}:first", f"{base}:whole", *keys)

    def followers(self) -> dict[str, float]:
        """Each following collection and when it stops following (0: not before told)."""
        raw: dict[bytes, bytes] = self.redis.hgetall(self._followers)  # type: ignore[assignment]
        return {k.decode(): float(v) for k, v in raw.items()}

    def now(self) -> int:
        """Redis's clock, in µs: the one every entry is stamped with."""
        seconds, micros = self.redis.time()
        return int(seconds) * 1_000_000 + int(micros)

    def capture(self, shard: ShardRange, keys: Iterable[str]) -> None:
        """Log the keys of one shard (of the live map) for every follower."""
        listed = [key for key in dict.fromkeys(keys) if key]
        if not listed:
            return
        hi = json.dumps(shard.hi)
        for start in range(0, len(listed), 1000):
            args: list[str | int] = [self.prefix, self.shard_keys, shard.lo, hi]
            args += listed[start : start + 1000]
            self._capture(keys=[self._followers], args=args)

    def capture_mapped(self, shards: ShardMap, keys: Iterable[str]) -> None:
        """Log keys of any shards of the map (an increment's chunk)."""
        by_shard: dict[str, list[str]] = {}
        for key in keys:
            by_shard.setdefault(shards.label_of(key), []).append(key)
        ranges = {r.lo: r for r in shards.ranges()}
        for lo, listed in by_shard.items():
            self.capture(ranges[lo], listed)

    def replay(self, collection: str, cut: int | None = None) -> Replay:
        """What the log holds up to the cut (now by default): read, not removed (`trim` does
        that once its replay has ended)."""
        cut = self.now() if cut is None else cut
        base = self._base(collection)
        whole: dict[bytes, bytes] = self.redis.hgetall(f"{base}:whole")  # type: ignore[assignment]
        shards = [ShardRange(lo.decode(), json.loads(hi)) for lo, hi in whole.items()]
        keys: list[str] = []
        labels: list[bytes] = self.redis.zrange(f"{base}:labels", 0, -1)  # type: ignore[assignment]
        for lo in labels:
            if lo in whole:
                continue
            found: list[bytes] = self.redis.zrangebyscore(f"{base}:keys:{lo.decode()}", "-inf", cut)  # type: ignore[assignment]
            keys += [k.decode() for k in found]
        return Replay(cut, keys, shards)

    def trim(self, collection: str, cut: int) -> None:
        """Forget the entries up to the cut: their replay has ended."""
        base = self._base(collection)
        keys = [f"{base}:labels", f"{base}:first", f"{base}:whole"]
        self._trim(keys=keys, args=[base, cut])

    def lag(self, collection: str) -> Lag:
        base = self._base(collection)
        labels: list[bytes] = self.redis.zrange(f"{base}:labels", 0, -1)  # type: ignore[assignment]
        whole = self.redis.hlen(f"{base}:whole")
        with self.redis.pipeline(transaction=False) as pipe:
            for lo in labels:
                pipe.zcard(f"{base}:keys:{lo.decode()}")
            pipe.zrange(f"{base}:first", 0, 0, withscores=True)
            *counts, first = pipe.execute()
        oldest = first[0][1] / 1e6 if first else None
        return Lag(int(sum(counts)), int(whole), oldest)

    def pending(self, collection: str) -> set[str]:
        """Every key waiting (for a check that explains differences by them)."""
        return set(self.replay(collection, cut=2**62).keys)
