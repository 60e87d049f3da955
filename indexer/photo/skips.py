"""Skip records: files that could not be indexed, at the version that failed, with the reason.

A sync does not try such a file again until it changes. The records of a collection are one
Redis sorted set whose members all score 0, so they sort by key and a shard reads those of its
key range with one ZRANGEBYLEX, at the cost of the range, however many there are in all. A
member is "<key>\\0<json [version, reason]>": "\\0" sorts before every other character, so
the members of one key sit together and precede those of any key it is a prefix of.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from redis import Redis

# Replace a key's record: drop the members of each key, add the new one.
_RECORD = """
for i = 1, #ARGV, 2 do
  local key = ARGV[i]
  local old = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. key .. '\\0', '(' .. key .. '\\1')
  if #old > 0 then redis.call('ZREM', KEYS[1], unpack(old)) end
  if ARGV[i + 1] ~= '' then redis.call('ZADD', KEYS[1], 0, key .. '\\0' .. ARGV[i + 1]) end
end
return 0
"""

Skipped = dict[str, tuple[str, str]]  # key -> (version, reason)


def _decode(members: Iterable[bytes]) -> Skipped:
    out: Skipped = {}
    for member in members:
        key, _, record = member.decode().partition("\0")
        version, reason = json.loads(record)
        out[key] = (str(version), str(reason))
    return out


class SkipRecords:
    """The skip records of every collection, in one Redis."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._record = redis.register_script(_RECORD)

    def _key(self, collection: str) -> str:
        return f"{self.prefix}:skipped:{collection}"

    def in_range(self, collection: str, lo: str, hi: str | None) -> Skipped:
        """The records of the keys in [lo, hi)."""
        end = "+" if hi is None else f"({hi}"
        members: list[bytes] = self.redis.zrangebylex(self._key(collection), f"[{lo}", end)  # type: ignore[assignment]
        return _decode(members)

    def get(self, collection: str, keys: Iterable[str]) -> Skipped:
        """The records of these keys (the change feed's)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrangebylex(self._key(collection), f"[{key}\0", f"({key}\1")
            found: list[list[bytes]] = pipe.execute()
        return _decode(member for members in found for member in members)

    def record(self, collection: str, entries: Mapping[str, tuple[str, str]]) -> None:
        if entries:
            args: list[str] = []
            for key, (version, reason) in entries.items():
                args += [key, json.dumps([version, reason])]
            self._record(keys=[self._key(collection)], args=args)

    def forget(self, collection: str, keys: Iterable[str]) -> None:
        args = [part for key in keys for part in (key, "")]
        if args:
            self._record(keys=[self._key(collection)], args=args)

    def count(self, collection: str) -> int:
        return int(self.redis.zcard(self._key(collection)))

    def drop(self, collection: str) -> None:
        self.redis.delete(self._key(collection))
