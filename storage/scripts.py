"""The Lua scripts that make each trial one atomic Redis step.

Every script takes the same fixed keys, all of one model (see :mod:`storage.keys`)::

    KEYS[1] meta   KEYS[2] log   KEYS[3] snapshot   KEYS[4] pending   KEYS[5] trials
    KEYS[6] curve  KEYS[7] window     KEYS[8] summary
    KEYS[9..]      one trial hash per item (predict, label)

and starts with ``ARGV[1]`` = the model's incarnation: a script for a model that was
deleted (and perhaps re-created) replies ``{'gone'}`` and writes nothing.

Replies are flat arrays led by a status string. ``entries`` is the log after the caller's
``known`` version (XRANGE format, at most ``limit`` entries) so that a worker catches up in
the same round trip; ``{'reload'}`` means the log no longer reaches back to ``known`` (or
Redis holds less than the worker has seen), and the worker must reload the model.

Folding. The log is the truth; mistakes, updates, the confusion counts, the mistake curve
and each labelled trial's ``updated`` flag follow from replaying it, which every worker
does. ``fold`` is a JSON document ``{"a": first seq, "e": [[y, p, u, trial id], ...]}`` of
outcomes a worker computed; each script first folds the entries after ``meta.folded`` (in
order, each exactly once) and ignores those already folded, so any worker may report any
outcome any number of times.
"""

from __future__ import annotations

__all__ = [
    "CREATE",
    "IMPORT",
    "LABEL",
    "LEARN",
    "PREDICT",
    "SNAPSHOT",
    "STATS",
    "SUMMARY",
    "SYNC",
]

CURVE_POINTS = 512  # the mistake curve keeps at most this many points
WINDOW_STEP, WINDOW_POINTS = 10, 101  # the sliding window: the last 1,000 trials

_PRELUDE = f"""
local meta = KEYS[1]
local WINDOW_STEP, WINDOW_POINTS = {WINDOW_STEP}, {WINDOW_POINTS}
local base = string.sub(meta, 1, -6)

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(key, field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

local function thin_curve(step)
  local pts = redis.call('LRANGE', KEYS[6], 0, -1)
  redis.call('DEL', KEYS[6])
  for _, pt in ipairs(pts) do
    if tonumber(string.match(pt, '^(%d+):')) % step == 0 then
      redis.call('RPUSH', KEYS[6], pt)
    end
  end
end

local function fold(payload)
  if payload == '' then return end
  local f = cjson.decode(payload)
  local folded, version = num(meta, 'folded'), num(meta, 'version')
  local mistakes, updates = num(meta, 'mistakes'), 0
  local step = math.max(1, num(meta, 'curve_step'))
  local seq = f.a - 1
  for _, e in ipairs(f.e) do
    seq = seq + 1
    if seq > version then break end
    if seq == folded + 1 then
      local y, p, u, id = e[1], e[2], e[3], e[4]
      if p ~= y then mistakes = mistakes + 1 end
      if u == 1 then updates = updates + 1 end
      redis.call('HINCRBY', meta, 'c:' .. y .. ':' .. p, 1)
      if id ~= '' then
        local key = base .. ':trial:' .. id
        if redis.call('HGET', key, 'q') == tostring(seq) then
          redis.call('HSET', key, 'u', u)
        end
      end
      if seq % WINDOW_STEP == 0 then
        redis.call('RPUSH', KEYS[7], seq .. ':' .. mistakes)
        redis.call('LTRIM', KEYS[7], -WINDOW_POINTS, -1)
      end
      if seq % step == 0 then
        redis.call('RPUSH', KEYS[6], seq .. ':' .. mistakes)
        if redis.call('LLEN', KEYS[6]) > {CURVE_POINTS} then
          step = step * 2
          thin_curve(step)
        end
      end
      folded = seq
    end
  end
  redis.call('HSET', meta, 'folded', folded, 'mistakes', mistakes, 'curve_step', step)
  if updates > 0 then redis.call('HINCRBY', meta, 'updates', updates) end
end

-- whether the log still holds every entry after known
local function reachable(known, version)
  if version < known then return false end
  if version == known then return true end
  local first = redis.call('XRANGE', KEYS[2], (known + 1) .. '-0', '+', 'COUNT', 1)
  return #first == 1 and first[1][1] == (known + 1) .. '-0'
end

-- the entries after known, up to upto, at most limit of them
local function catchup(known, upto, limit)
  if upto <= known or limit <= 0 then return {{}} end
  return redis.call('XRANGE', KEYS[2], (known + 1) .. '-0', upto .. '-0', 'COUNT', limit)
end

-- pending trials past their deadline become expired, a few per call
local function sweep(now)
  local late = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 64)
  if #late > 0 then
    redis.call('ZREM', KEYS[4], unpack(late))
    redis.call('HINCRBY', meta, 'expired', #late)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
end

if redis.call('HGET', meta, 'incarnation') ~= ARGV[1] then return {{'gone'}} end
"""

CREATE = """
-- ARGV: 1 incarnation, 2 config (JSON)
-- Reply: {'ok'} or {'exists'}
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'incarnation', ARGV[1], 'config', ARGV[2], 'created', t[1],
           'version', 0, 'folded', 0, 'mistakes', 0, 'curve_step', 1)
return {'ok'}
"""

SYNC = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit
-- Reply: {'ok', version, folded, entries} | {'reload'} | {'gone'}
fold(ARGV[3])
local version, known = num(meta, 'version'), tonumber(ARGV[2])
if not reachable(known, version) then return {'reload'} end
return {'ok', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[4]))}
"""
)

PREDICT = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version (the one that predicted), 3 strict ('1': store only
-- if known is current), 4 label time-to-live in ms, 5 fold, 6 limit, then per item from 7:
-- trial id, instance, predicted class, scores
-- Reply: {'ok', version, folded, entries, results} with per item {'ok'} (stored),
-- {'existing', p, scores, v} (same instance already pending under that id) or {'conflict'};
-- {'stale', version, folded, entries} when strict and known is not current
fold(ARGV[5])
local version, known = num(meta, 'version'), tonumber(ARGV[2])
if not reachable(known, version) then return {'reload'} end
local entries = catchup(known, version, tonumber(ARGV[6]))
if ARGV[3] == '1' and version ~= known then
  return {'stale', version, num(meta, 'folded'), entries}
end
local now = now_ms()
sweep(now)
local ttl = tonumber(ARGV[4])
-- a trial outlives its deadline by the grace: late labels are told it expired, and a
-- labelled trial answers retried labels
local grace = math.max(ttl, 60000)
local results, created = {}, 0
for i = 7, #ARGV, 4 do
  local key = KEYS[9 + (i - 7) / 4]
  local id, x = ARGV[i], ARGV[i + 1]
  local old = redis.call('HMGET', key, 'x', 'p', 's', 'v', 'y')
  if old[2] then
    if old[1] == x and not old[5] then
      results[#results + 1] = {'existing', old[2], old[3], old[4]}
    else
      results[#results + 1] = {'conflict'}
    end
  else
    local deadline = now + ttl
    redis.call('HSET', key, 'x', x, 'p', ARGV[i + 2], 's', ARGV[i + 3], 'v', known,
               'd', deadline)
    redis.call('PEXPIREAT', key, deadline + grace)
    redis.call('ZADD', KEYS[4], deadline, id)
    redis.call('ZADD', KEYS[5], deadline + grace, id)
    created = created + 1
    results[#results + 1] = {'ok'}
  end
end
if created > 0 then redis.call('HINCRBY', meta, 'predictions', created) end
return {'ok', version, num(meta, 'folded'), entries, results}
"""
)

LABEL = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, then per item from 5:
-- trial id, true class
-- Reply: {'ok', version, folded, entries, results} with per item {'ok', p, seq} (applied
-- as log entry seq), {'repeat', p, seq, u} (this label was applied before; u may be ''
-- while not yet folded), {'conflict', y} (labelled otherwise), {'expired'}, {'unknown'}
fold(ARGV[3])
local version, known = num(meta, 'version'), tonumber(ARGV[2])
if not reachable(known, version) then return {'reload'} end
local now = now_ms()
sweep(now)
local results, applied = {}, 0
for i = 5, #ARGV, 2 do
  local key = KEYS[9 + (i - 5) / 2]
  local id, y = ARGV[i], ARGV[i + 1]
  local r = redis.call('HMGET', key, 'x', 'p', 'd', 'y', 'q', 'u')
  if not r[2] then
    results[#results + 1] = {'unknown'}
  elseif r[4] then
    if r[4] == y then
      results[#results + 1] = {'repeat', r[2], r[5], r[6] or ''}
    else
      results[#results + 1] = {'conflict', r[4]}
    end
  elseif now > tonumber(r[3]) then
    redis.call('HINCRBY', meta, 'late_labels', 1)
    results[#results + 1] = {'expired'}
  else
    version = version + 1
    redis.call('XADD', KEYS[2], version .. '-0', 'k', 'l', 't', id, 'x', r[1], 'y', y,
               'p', r[2])
    redis.call('HSET', key, 'y', y, 'q', version)
    redis.call('HDEL', key, 'x', 's')
    redis.call('ZREM', KEYS[4], id)
    applied = applied + 1
    results[#results + 1] = {'ok', r[2], version}
  end
end
if applied > 0 then
  redis.call('HSET', meta, 'version', version)
  redis.call('HINCRBY', meta, 'labelled', applied)
end
return {'ok', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[4])),
        results}
"""
)

LEARN = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, then per item from 5:
-- instance, true class
-- Reply: {'ok', version, folded, entries, first seq of these items}, the entries being
-- those before the first of these items (the caller has its own)
fold(ARGV[3])
local version, known = num(meta, 'version'), tonumber(ARGV[2])
if not reachable(known, version) then return {'reload'} end
local first = version + 1
for i = 5, #ARGV, 2 do
  version = version + 1
  redis.call('XADD', KEYS[2], version .. '-0', 'k', 'n', 'x', ARGV[i], 'y', ARGV[i + 1])
end
redis.call('HSET', meta, 'version', version)
redis.call('HINCRBY', meta, 'learned', version - first + 1)
return {'ok', version, num(meta, 'folded'), catchup(known, first - 1, tonumber(ARGV[4])), first}
"""
)

SNAPSHOT = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 version of the state, 3 state, 4 fold, 5 log entries to keep
-- Reply: {'ok', snapshot version} | {'unfolded'} (fold up to the version first)
-- Keeps the newer snapshot and trims the log to what follows it, but never below the
-- last ARGV[5] entries.
fold(ARGV[4])
local v = tonumber(ARGV[2])
if num(meta, 'folded') < v then return {'unfolded'} end
local cur = tonumber(redis.call('HGET', KEYS[3], 'version') or '-1')
if v > cur then
  redis.call('HSET', KEYS[3], 'version', v, 'state', ARGV[3])
  cur = v
end
local keep = math.min(cur + 1, num(meta, 'version') - tonumber(ARGV[5]) + 1)
if keep > 1 then redis.call('XTRIM', KEYS[2], 'MINID', keep .. '-0') end
return {'ok', cur}
"""
)

IMPORT = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 state, 4 fold, 5 limit
-- Reply: {'ok', seq} | {'stale', version, folded, entries} (catch up, fold, retry)
-- Replaces the learner state: appends a reset entry (k = r) at seq and keeps the state as
-- the snapshot at seq; workers that replay the reset entry reload from the snapshot.
fold(ARGV[4])
local version, known = num(meta, 'version'), tonumber(ARGV[2])
if not reachable(known, version) then return {'reload'} end
if version ~= known or num(meta, 'folded') < known then
  return {'stale', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[5]))}
end
version = version + 1
redis.call('XADD', KEYS[2], version .. '-0', 'k', 'r')
redis.call('HSET', KEYS[3], 'version', version, 'state', ARGV[3])
redis.call('HSET', meta, 'version', version, 'folded', version)
redis.call('HINCRBY', meta, 'imports', 1)
return {'ok', version}
"""
)

SUMMARY = (
    _PRELUDE
    + """
-- ARGV: 1 incarnation, 2 version the summary describes, 3 summary (JSON)
-- Reply: {'ok'}; keeps the newer of the stored and the given summary
local cur = tonumber(redis.call('HGET', KEYS[8], 'version') or '-1')
if tonumber(ARGV[2]) > cur then
  redis.call('HSET', KEYS[8], 'version', ARGV[2], 'doc', ARGV[3])
end
return {'ok'}
"""
)

STATS = """
-- ARGV: 1 now (ms)
-- Reply: {'ok', meta (flat field/value list), pending, overdue, curve, window,
--         summary version or '', summary or ''} | {'gone'}
-- Reads what a dashboard shows in one step; the model's incarnation is not checked.
local meta = redis.call('HGETALL', KEYS[1])
if #meta == 0 then return {'gone'} end
local now = ARGV[1]
local summary = redis.call('HMGET', KEYS[8], 'version', 'doc')
return {'ok', meta,
        redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'),
        redis.call('ZCOUNT', KEYS[4], '-inf', now),
        redis.call('LRANGE', KEYS[6], 0, -1), redis.call('LRANGE', KEYS[7], 0, -1),
        summary[1] or '', summary[2] or ''}
"""
