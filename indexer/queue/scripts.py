"""The work queue's Lua scripts (indexer/queue/workqueue.py): each change of a job's work is
one of them, so it happens whole or not at all. A script's KEYS are the job's record, then its
lists in the order of `JOB_KEYS`."""

from __future__ import annotations

# Shared by the scripts: a round that has started ends when every list and claim is empty,
# once (1 for the call that ends it).
ROUND_DONE = """
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
#       8 work tokens, 9 unit ids, 10 planned, 11 held (`HELD_KEY`)
JOB_KEYS = (
    "units",
    "pclaims",
    "ptokens",
    "work",
    "items",
    "wclaims",
    "wtokens",
    "unitids",
    "planned",
)
# The tokens a live worker holds, scored by its last heartbeat (a zset after the previous
# release's keys: work that release queued has none, and is swept by the ttl as it was).
HELD_KEY = "held"

START_ROUND = (
    ROUND_DONE
    + """
-- ARGV: round. Reset the round's bookkeeping once, whoever asks again.
if redis.call('HSETNX', KEYS[1], 'round_started:' .. ARGV[1], 1) == 0 then return 0 end
redis.call('DEL', KEYS[2], KEYS[9], KEYS[10])
redis.call('HSET', KEYS[1], 'round', ARGV[1], 'shards_total', 0, 'shards_planned', 0, 'changes', 0)
return 1
"""
)

ADD_UNITS = """
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

# Shared by RESERVE and REQUEUE: what a token claimed goes back first in line, and the token
# is forgotten, held (KEYS[11]) or not.
GIVE_BACK = """
local function give_back(tokens, claims, list, token)
  local held = redis.call('HGET', claims, token)
  if held then
    redis.call('LPUSH', list, held)
    redis.call('HDEL', claims, token)
  end
  redis.call('ZREM', tokens, token)
  redis.call('ZREM', KEYS[11], token)
end
"""

RESERVE = (
    ROUND_DONE
    + GIVE_BACK
    + """
-- ARGV: now, ttl, max embed tokens, max plan tokens, plan ahead, job id, lease.
-- Returns {embed token ids, plan token ids, 1 when the round ended now}.
if stopped() then return {{}, {}, 0} end
local now = tonumber(ARGV[1])
local cutoff, gone = now - tonumber(ARGV[2]), now - tonumber(ARGV[7])
-- A token a worker holds (it claimed, or its worker received it) is renewed by that worker's
-- heartbeat; one not renewed for the lease lost its holder (the worker died, or this Redis
-- restarted under it): its work goes back first in line, its room comes back.
for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', '(' .. gone)) do
  give_back(KEYS[8], KEYS[7], KEYS[5], t)
  give_back(KEYS[4], KEYS[3], KEYS[2], t)
end
-- A token never held is swept past the ttl: never sent, or sent and lost.
local function sweep(tokens, claims, list)
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', tokens, '-inf', cutoff)) do
    if not redis.call('ZSCORE', KEYS[11], t) then give_back(tokens, claims, list, t) end
  end
end
sweep(KEYS[8], KEYS[7], KEYS[5])
sweep(KEYS[4], KEYS[3], KEYS[2])
-- Tokens that will take waiting work: unclaimed, and held or handed out within the lease. One
-- unheld for longer may be lost (in a delivery Redis's crash cut short): it keeps its room
-- until the ttl, but the work it would take gets a token of its own.
local function idle(tokens, claims)
  local n = 0
  local scored = redis.call('ZRANGE', tokens, 0, -1, 'WITHSCORES')
  for i = 1, #scored, 2 do
    local t = scored[i]
    if redis.call('HEXISTS', claims, t) == 0
       and (tonumber(scored[i + 1]) > gone or redis.call('ZSCORE', KEYS[11], t)) then
      n = n + 1
    end
  end
  return n
end
local function hand_out(tokens, claims, waiting_work, limit, kind)
  local out = redis.call('ZCARD', tokens)
  local n = math.min(limit - out, waiting_work - idle(tokens, claims))
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

CLAIM = (
    ROUND_DONE
    + """
-- ARGV: token, 'unit' or 'work', now. Returns {id, body}, {id, false} (done already) or nil.
local list, claims, tokens, store = KEYS[2], KEYS[3], KEYS[4], nil
if ARGV[2] == 'work' then list, claims, tokens, store = KEYS[5], KEYS[7], KEYS[8], KEYS[6] end
-- Claiming (again, on a retry) shows the token alive and held: from now on its worker's
-- heartbeat keeps it, and the lease ends it when that stops.
redis.call('ZADD', tokens, ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[11], ARGV[3], ARGV[1])
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

COMMIT = (
    ROUND_DONE
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
redis.call('ZREM', KEYS[11], token)
return round_done()
"""
)

COMPLETE = (
    ROUND_DONE
    + """
-- ARGV: token, batch id, counter pairs. A batch counts once: its entry goes with the count.
if redis.call('HDEL', KEYS[6], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'batches_done', 1)
  for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
redis.call('ZREM', KEYS[11], ARGV[1])
return round_done()
"""
)

RELEASE = (
    ROUND_DONE
    + """
-- ARGV: token. A token that found nothing to do.
redis.call('ZREM', KEYS[8], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[11], ARGV[1])
return round_done()
"""
)


REQUEUE = (
    GIVE_BACK
    + """
-- ARGV: a token; or '', the highest last-claim time (a ZRANGEBYSCORE bound) and the tokens
-- to leave: every other token that last claimed by then. What a token claimed goes back
-- first in line, and the token is forgotten: its task failed for good, or its worker is gone.
-- A task a live worker runs keeps its claim: given back, its batch would be embedded twice.
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
)

HEARTBEAT = """
-- ARGV: now, token... The tokens a live worker holds (received or running), still out: their
-- lease starts again. Returns how many were renewed.
local n = 0
for i = 2, #ARGV do
  local t = ARGV[i]
  if redis.call('ZSCORE', KEYS[8], t) or redis.call('ZSCORE', KEYS[4], t) then
    redis.call('ZADD', KEYS[11], ARGV[1], t)
    n = n + 1
  end
end
return n
"""
