"""A job's work in Redis: shards to plan, batches to embed, and the tokens that pull them.

The broker never carries the work itself, only tokens: a plan token (queue `plan`) takes one
shard of the job, an embed token (queue `embed`) one batch. Tokens are handed out (`reserve`)
so that at most `max_queued` embed tokens of a job exist at once, and plan tokens only while
fewer than `plan_ahead` batches wait: the broker's memory is bounded whatever the catalogue's
size, and planning goes on as batches complete. Every change is one Lua script, so it happens
whole or not at all:

- a token claims its shard or batch under its own task id: a token delivered again after its
  worker died (or retried) finds the same work, and none is done by two tokens at once;
- a planned shard commits its batches and counts once (fenced by the shard's id);
- a batch counts once (its entry is deleted by the count);
- the round ends exactly once: when nothing is left to plan, claimed or embedded.

A token lost between reservation and publication, or whose task ended without counting its
work (Redis down when it failed), is swept once it has not claimed for `ttl_s`: its room comes
back and its work goes first in line. Each worker nudges the unfinished jobs now and then
(indexer/tasks.py), so a job whose every token was lost still moves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from redis import Redis

# Shared by the scripts: a round that has started ends when every list and claim is empty,
# once (1 for the call that ends it).
_ROUND_DONE = """
local function round_done()
  local r = redis.call('HGET', KEYS[1], 'round') or '0'
  if not redis.call('HGET', KEYS[1], 'round_started:' .. r) then return 0 end
  if redis.call('LLEN', KEYS[2]) == 0 and redis.call('HLEN', KEYS[3]) == 0
     and redis.call('LLEN', KEYS[5]) == 0 and redis.call('HLEN', KEYS[7]) == 0 then
    return redis.call('HSETNX', KEYS[1], 'round_done:' .. r, 1)
  end
  return 0
end
local function finished()
  local state = redis.call('HGET', KEYS[1], 'state')
  return state == 'done' or state == 'failed' or state == 'cancelled'
end
-- A paused job hands out no work until it goes on (indexer/jobs/pause.py).
local function stopped()
  return finished() or redis.call('HGET', KEYS[1], 'state') == 'paused'
end
"""
# KEYS: 1 job, 2 units, 3 unit claims, 4 plan tokens, 5 work, 6 items, 7 work claims,
#       8 work tokens, 9 unit ids, 10 planned
_KEYS = ("units", "pclaims", "ptokens", "work", "items", "wclaims", "wtokens", "unitids", "planned")

_START_ROUND = (
    _ROUND_DONE
    + """
-- ARGV: round. Reset the round's bookkeeping once, whoever asks again.
if redis.call('HSETNX', KEYS[1], 'round_started:' .. ARGV[1], 1) == 0 then return 0 end
redis.call('DEL', KEYS[2], KEYS[9], KEYS[10])
redis.call('HSET', KEYS[1], 'round', ARGV[1], 'shards_total', 0, 'shards_planned', 0, 'changes', 0)
return 1
"""
)

_ADD_UNITS = """
-- ARGV: unit id, unit json, ... Each unit once per round.
local added = 0
for i = 1, #ARGV, 2 do
  if redis.call('SADD', KEYS[9], ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    added = added + 1
  end
end
redis.call('HINCRBY', KEYS[1], 'shards_total', added)
return added
"""

_RESERVE = (
    _ROUND_DONE
    + """
-- ARGV: now, ttl, max embed tokens, max plan tokens, plan ahead, job id.
-- Returns {embed token ids, plan token ids, 1 when the round ended now}.
if stopped() then return {{}, {}, 0} end
local now, cutoff = tonumber(ARGV[1]), tonumber(ARGV[1]) - tonumber(ARGV[2])
-- A token's score is when it was handed out or last claimed its work (each retry claims
-- again). Past the ttl it is lost: never sent, or its task ended without counting its work
-- (a failure whose report Redis missed). Its room comes back, and its work goes first in line.
local function sweep(tokens, claims, list)
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', tokens, '-inf', cutoff)) do
    local held = redis.call('HGET', claims, t)
    if held then
      redis.call('LPUSH', list, held)
      redis.call('HDEL', claims, t)
    end
    redis.call('ZREM', tokens, t)
  end
end
sweep(KEYS[8], KEYS[7], KEYS[5])
sweep(KEYS[4], KEYS[3], KEYS[2])
local function hand_out(tokens, claims, waiting_work, limit, kind)
  local out = redis.call('ZCARD', tokens)
  local idle = out - redis.call('HLEN', claims)
  local n = math.min(limit - out, waiting_work - idle)
  local ids = {}
  for _ = 1, n do
    local id = ARGV[6] .. '-' .. kind .. redis.call('HINCRBY', KEYS[1], 'token_seq', 1)
    redis.call('ZADD', tokens, now, id)
    table.insert(ids, id)
  end
  return ids
end
local waiting = redis.call('LLEN', KEYS[5])
local embed = hand_out(KEYS[8], KEYS[7], waiting, tonumber(ARGV[3]), 'e')
local plan = {}
if waiting < tonumber(ARGV[5]) then
  plan = hand_out(KEYS[4], KEYS[3], redis.call('LLEN', KEYS[2]), tonumber(ARGV[4]), 'p')
end
return {embed, plan, round_done()}
"""
)

_CLAIM = (
    _ROUND_DONE
    + """
-- ARGV: token, 'unit' or 'work', now. Returns {id, body}, {id, false} (done already) or nil.
local list, claims, tokens, store = KEYS[2], KEYS[3], KEYS[4], nil
if ARGV[2] == 'work' then list, claims, tokens, store = KEYS[5], KEYS[7], KEYS[8], KEYS[6] end
-- Claiming (again, on a retry) shows the token alive: the sweep leaves it its work.
redis.call('ZADD', tokens, ARGV[3], ARGV[1])
local held = redis.call('HGET', claims, ARGV[1])
if held then
  if store then return {held, redis.call('HGET', store, held)} end
  return {'unit', held}
end
if stopped() then return nil end
local item = redis.call('LPOP', list)
if not item then return nil end
if store then
  redis.call('HSET', claims, ARGV[1], item)
  return {item, redis.call('HGET', store, item)}
end
redis.call('HSET', claims, ARGV[1], item)
return {'unit', item}
"""
)

_COMMIT = (
    _ROUND_DONE
    + """
-- ARGV: token, unit id, record, n batches, batch..., n units, (unit id, unit)...,
--       n marks, (key, value, ttl)..., counter pairs
local token, unit, record = ARGV[1], ARGV[2], ARGV[3]
local i = 4
local n = tonumber(ARGV[i]); i = i + 1
local batches = {}
for _ = 1, n do table.insert(batches, ARGV[i]); i = i + 1 end
local m = tonumber(ARGV[i]); i = i + 1
local units = {}
for _ = 1, m do table.insert(units, {ARGV[i], ARGV[i + 1]}); i = i + 2 end
local k = tonumber(ARGV[i]); i = i + 1
local marks = {}
for _ = 1, k do table.insert(marks, {ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])}); i = i + 3 end
if redis.call('HSETNX', KEYS[10], unit, record) == 1 and not finished() then
  -- A feed's checkpoint goes with the plan it was read for.
  for _, mark in ipairs(marks) do
    if mark[3] > 0 then redis.call('SET', mark[1], mark[2], 'EX', mark[3])
    else redis.call('SET', mark[1], mark[2]) end
  end
  for _, b in ipairs(batches) do
    local id = 'b' .. redis.call('HINCRBY', KEYS[1], 'batch_seq', 1)
    redis.call('HSET', KEYS[6], id, b)
    redis.call('RPUSH', KEYS[5], id)
  end
  redis.call('HINCRBY', KEYS[1], 'batches_total', n)
  local added = 0
  for _, u in ipairs(units) do
    if redis.call('SADD', KEYS[9], u[1]) == 1 then
      redis.call('RPUSH', KEYS[2], u[2]); added = added + 1
    end
  end
  redis.call('HINCRBY', KEYS[1], 'shards_total', added)
  redis.call('HINCRBY', KEYS[1], 'shards_planned', 1)
  while i <= #ARGV do
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]); i = i + 2
  end
end
redis.call('HDEL', KEYS[3], token)
redis.call('ZREM', KEYS[4], token)
return round_done()
"""
)

_COMPLETE = (
    _ROUND_DONE
    + """
-- ARGV: token, batch id, counter pairs. A batch counts once: its entry goes with the count.
if redis.call('HDEL', KEYS[6], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'batches_done', 1)
  for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
return round_done()
"""
)

_RELEASE = (
    _ROUND_DONE
    + """
-- ARGV: token. A token that found nothing to do.
redis.call('ZREM', KEYS[8], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return round_done()
"""
)


_REQUEUE = """
-- ARGV: a token; or '', the highest last-claim time (a ZRANGEBYSCORE bound) and the tokens
-- to leave: every other token that last claimed by then. What a token claimed goes back
-- first in line, and the token is forgotten: its task failed for good, or its worker is gone.
-- A task a live worker runs keeps its claim: given back, its batch would be embedded twice.
local function give_back(tokens, claims, list, token)
  local held = redis.call('HGET', claims, token)
  if held then
    redis.call('LPUSH', list, held)
    redis.call('HDEL', claims, token)
  end
  redis.call('ZREM', tokens, token)
end
if ARGV[1] ~= '' then
  give_back(KEYS[8], KEYS[7], KEYS[5], ARGV[1])
  give_back(KEYS[4], KEYS[3], KEYS[2], ARGV[1])
  return 1
end
local running = {}
for i = 3, #ARGV do running[ARGV[i]] = true end
local n = 0
for _, kind in ipairs({{KEYS[8], KEYS[7], KEYS[5]}, {KEYS[4], KEYS[3], KEYS[2]}}) do
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', kind[1], '-inf', ARGV[2])) do
    if not running[t] then give_back(kind[1], kind[2], kind[3], t); n = n + 1 end
  end
  -- Claims whose token was swept already.
  local claims = redis.call('HGETALL', kind[2])
  for i = 1, #claims, 2 do
    local t = claims[i]
    if not running[t] and not redis.call('ZSCORE', kind[1], t) then
      redis.call('LPUSH', kind[3], claims[i + 1])
      redis.call('HDEL', kind[2], t)
    end
  end
end
return n
"""


@dataclass(frozen=True)
class Tokens:
    """Token ids to publish: embed tokens and plan tokens; and whether the round ended."""

    embed: list[str]
    plan: list[str]
    round_ended: bool = False


@dataclass(frozen=True)
class Claimed:
    """What a token holds: a batch (id and body, None when counted already) or a unit."""

    id: str
    body: dict[str, Any] | None


class WorkQueue:
    """The work of every job, in one Redis.

    `now` is the clock a token's hand-out and claims are stamped with, which the sweep's ttl
    is measured against: the workers' own clock unless a test brings one.
    """

    def __init__(self, redis: Redis, prefix: str, *, now: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.prefix = prefix
        self.now = now
        self._start = redis.register_script(_START_ROUND)
        self._add = redis.register_script(_ADD_UNITS)
        self._reserve = redis.register_script(_RESERVE)
        self._claim = redis.register_script(_CLAIM)
        self._commit = redis.register_script(_COMMIT)
        self._complete = redis.register_script(_COMPLETE)
        self._release = redis.register_script(_RELEASE)
        self._requeue = redis.register_script(_REQUEUE)

    def keys(self, job_id: str) -> list[str]:
        job = f"{self.prefix}:job:{job_id}"
        return [job, *(f"{job}:{name}" for name in _KEYS)]

    def start_round(
        self, job_id: str, round_: int, units: Iterable[tuple[str, dict[str, Any]]]
    ) -> bool:
        """Open a round with its units (id, unit); False when it was opened before, whose
        units are then added again (each once: a start run again after a crash)."""
        started = bool(self._start(keys=self.keys(job_id), args=[round_]))
        self.add_units(job_id, units)
        return started

    def add_units(self, job_id: str, units: Iterable[tuple[str, dict[str, Any]]]) -> int:
        added, chunk = 0, []
        for unit_id, unit in units:
            chunk += [unit_id, json.dumps(unit)]
            if len(chunk) >= 2000:
                added += int(self._add(keys=self.keys(job_id), args=chunk))
                chunk = []
        if chunk:
            added += int(self._add(keys=self.keys(job_id), args=chunk))
        return added

    def reserve(
        self, job_id: str, *, max_embed: int, max_plan: int, plan_ahead: int, ttl_s: float
    ) -> Tokens:
        """Tokens to publish now (their ids are taken: publish each, or it is swept later)."""
        args: list[Any] = [self.now(), ttl_s, max_embed, max_plan, plan_ahead, job_id]
        embed, plan, ended = self._reserve(keys=self.keys(job_id), args=args)
        return Tokens([i.decode() for i in embed], [i.decode() for i in plan], bool(ended))

    def claim_unit(self, job_id: str, token: str) -> dict[str, Any] | None:
        found = self._claim(keys=self.keys(job_id), args=[token, "unit", self.now()])
        return None if found is None else dict(json.loads(found[1]))

    def claim_batch(self, job_id: str, token: str) -> Claimed | None:
        found = self._claim(keys=self.keys(job_id), args=[token, "work", self.now()])
        if found is None:
            return None
        batch_id, body = found[0].decode(), found[1]
        return Claimed(batch_id, json.loads(body) if body else None)

    def commit(
        self,
        job_id: str,
        token: str,
        unit_id: str,
        record: Mapping[str, Any],
        *,
        batches: Iterable[Mapping[str, Any]] = (),
        units: Iterable[tuple[str, dict[str, Any]]] = (),
        counts: Mapping[str, int] | None = None,
        marks: Mapping[str, tuple[str, int]] | None = None,
    ) -> bool:
        """A unit's plan, once: its batches, the units it adds, the marks it sets (key ->
        (value, ttl s, 0 for none)), its counts. True when the round ended with it."""
        bodies = [json.dumps(b) for b in batches]
        pairs = [part for unit_id_, unit in units for part in (unit_id_, json.dumps(unit))]
        args: list[Any] = [token, unit_id, json.dumps(record), len(bodies), *bodies]
        args += [len(pairs) // 2, *pairs]
        marked = [part for key, (value, ttl) in (marks or {}).items() for part in (key, value, ttl)]
        args += [len(marked) // 3, *marked]
        for name, value in (counts or {}).items():
            if value:
                args += [name, value]
        return bool(self._commit(keys=self.keys(job_id), args=args))

    def complete(self, job_id: str, token: str, batch_id: str, counts: Mapping[str, int]) -> bool:
        """Count a batch once; True when the round ended with it."""
        args: list[Any] = [token, batch_id]
        for name, value in counts.items():
            args += [name, value]
        return bool(self._complete(keys=self.keys(job_id), args=args))

    def release(self, job_id: str, token: str) -> bool:
        """A token that found nothing to claim; True when the round ended (a last token)."""
        return bool(self._release(keys=self.keys(job_id), args=[token]))

    def requeue(
        self,
        job_id: str,
        token: str | None = None,
        *,
        running: Collection[str] = (),
        before: float | None = None,
    ) -> int:
        """Give back what a token claimed, first in line; the token is forgotten. For None,
        every token's (a job resumed after its workers died or it was stopped) but those of
        `running` tasks and those that claimed at or after `before`: tasks live workers run,
        whose batches would be embedded twice. How many tokens were forgotten."""
        if token is not None:
            return int(self._requeue(keys=self.keys(job_id), args=[token]))
        bound = "+inf" if before is None else f"({before!r}"
        return int(self._requeue(keys=self.keys(job_id), args=["", bound, *running]))

    def round_done(self, job_id: str, round_: int) -> bool:
        """Whether that round of the job has ended."""
        return bool(self.redis.hexists(self.keys(job_id)[0], f"round_done:{round_}"))

    def planned(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The records of this round's planned shards, by shard id."""
        raw: dict[bytes, bytes] = self.redis.hgetall(self.keys(job_id)[9])  # type: ignore[assignment]
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def backlog(self, job_id: str) -> dict[str, int]:
        """Shards waiting, shards being planned, batches waiting, batches being embedded."""
        keys = self.keys(job_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(keys[1])
            pipe.hlen(keys[2])
            pipe.llen(keys[4])
            pipe.hlen(keys[6])
            shards, planning, batches, embedding = pipe.execute()
        return {"shards": shards, "planning": planning, "batches": batches, "embedding": embedding}

    def drop(self, job_id: str, keep_s: int) -> None:
        """Forget a finished job's work; what its shards' planning recorded (who planned what,
        when, what it found: one entry per shard) is kept keep_s, as the job's record."""
        keys = self.keys(job_id)
        self.redis.delete(*keys[1:9])
        self.redis.expire(keys[9], keep_s)
