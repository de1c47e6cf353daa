"""The Lua scripts that make each trial one atomic Redis step.

Every trial script takes the same fixed keys, all of one model, built by
:meth:`storage.keys.Keys.all_fixed`, then the keys of the call::

    KEYS[1] meta   KEYS[2] log   KEYS[3] snapshot   KEYS[4] pending   KEYS[5] trials
    KEYS[6] curve  KEYS[7] window     KEYS[8] summary
    KEYS[9..] one trial hash per item (predict, label), or idempotency records (learn)
    then, last, the key of each folded outcome that names one (see Folding)

and starts with ``ARGV[1]`` = the model's incarnation: a script for a model that was
deleted (and perhaps re-created) replies ``{'gone'}`` and writes nothing. Trial keys carry
the incarnation too, so nothing of a deleted model is ever applied to its successor. The
scripts build no key names and touch no key they are not given, so that a Redis Cluster
routes each call whole to one node, a slot being moved included.

Replies are flat arrays led by a status string. ``entries`` is the log after the caller's
``known`` version (XRANGE format, at most ``limit`` entries) so that a worker catches up in
the same round trip; LABEL and LEARN stop it before what they append, which the caller
has already or is sent in the results. ``{'reload'}`` means the log no longer reaches back
to ``known`` (or Redis holds less than the worker has seen), and the worker must reload
the model.

Whatever a script writes into the log is checked first: a class index below the model's
``k`` labels, an instance whose binary form is well made and whose largest coordinate is
below the model's ``n``. A script that finds a bad item writes nothing.

Folding. The log is the truth; mistakes, updates, the confusion counts, the mistake curve
and each labelled trial's ``updated`` flag follow from replaying it, which every worker
does. ``fold`` is a JSON document ``{"a": first seq, "e": [[y, p, u, trial id], ...]}`` of
outcomes a worker computed; each script first folds the entries after ``meta.folded`` (in
order, each exactly once) and ignores those already folded, so any worker may report any
outcome any number of times; the outcome of a learn appended with an idempotency key
(id ``!<key>``) goes into that key's record as field ``o<seq>`` = ``p:u``, so a retry
answers from it whoever replays. ``u`` is 0 (no update), 1 (updated), 2 (the entry could not
be replayed and was skipped by every worker: quarantined), 3 (the learner refused the
update whole) or 4 (a change of the model's input, not a trial: nothing is counted).
"""

from __future__ import annotations

__all__ = [
    "CURVE_POINTS",
    "LABEL",
    "LEARN",
    "PREDICT",
    "PRELUDE",
    "SYNC",
    "WINDOW_POINTS",
    "WINDOW_STEP",
]

CURVE_POINTS = 512  # the mistake curve keeps at most this many points
WINDOW_STEP, WINDOW_POINTS = 10, 101  # the sliding window: the last 1,000 trials

PRELUDE = f"""
local meta = KEYS[1]
local WINDOW_STEP, WINDOW_POINTS = {WINDOW_STEP}, {WINDOW_POINTS}

-- ARGV[2], where the caller stands: '<version>/<stamp of that entry>/<stamp for the
-- entries this call appends>', or a bare version
local function position(arg)
  local v, seen, stamp = string.match(arg, '^(%d+)/([^/]*)/([^/]*)$')
  if v then return tonumber(v), seen, stamp end
  return tonumber(arg), '', ''
end
local known, seen, stamp = position(ARGV[2])

-- the stamp of a log entry (XRANGE's flat field list); '' for an entry without one
local function stamp_of(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'w' then return fields[i + 1] end
  end
  return ''
end

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
  -- the keys of the outcomes that name a trial or a record are the last KEYS, in order
  local named = 0
  for _, e in ipairs(f.e) do
    if e[4] ~= '' then named = named + 1 end
  end
  local at = #KEYS - named
  local folded, version = num(meta, 'folded'), num(meta, 'version')
  local mistakes, updates = num(meta, 'mistakes'), 0
  local quarantined, refused = 0, 0
  -- the confusion counts this fold adds, one HINCRBY per cell (in first-seen order)
  local cells, added = {{}}, {{}}
  local step = math.max(1, num(meta, 'curve_step'))
  local seq = f.a - 1
  for _, e in ipairs(f.e) do
    seq = seq + 1
    if seq > version then break end
    local key = nil
    if e[4] ~= '' then
      at = at + 1
      key = KEYS[at]
    end
    if seq == folded + 1 then
      local y, p, u, id = e[1], e[2], e[3], e[4]
      if u == 2 then
        quarantined = quarantined + 1
      elseif u == 4 then  -- a change of the model's input: no trial
      else
        if p ~= y then mistakes = mistakes + 1 end
        if u == 1 then updates = updates + 1 end
        if u == 3 then refused = refused + 1 end
        local cell = 'c:' .. y .. ':' .. p
        if added[cell] then
          added[cell] = added[cell] + 1
        else
          cells[#cells + 1], added[cell] = cell, 1
        end
      end
      if string.sub(id, 1, 1) == '!' then  -- a keyed learn: its record keeps the outcome
        local tail = ':idem:' .. string.sub(id, 2)
        if string.sub(key, -#tail) == tail and redis.call('EXISTS', key) == 1 then
          redis.call('HSET', key, 'o' .. seq, p .. ':' .. u)
        end
      elseif id ~= '' then
        local tail = ':' .. id
        if string.sub(key, -#tail) == tail and redis.call('HGET', key, 'q') == tostring(seq) then
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
  for _, cell in ipairs(cells) do redis.call('HINCRBY', meta, cell, added[cell]) end
  redis.call('HSET', meta, 'folded', folded, 'mistakes', mistakes, 'curve_step', step)
  if updates > 0 then redis.call('HINCRBY', meta, 'updates', updates) end
  if quarantined > 0 then redis.call('HINCRBY', meta, 'quarantined', quarantined) end
  if refused > 0 then redis.call('HINCRBY', meta, 'refused', refused) end
end

-- whether the log still holds every entry after known and, when the caller gives the
-- stamp of its entry at known, whether that entry is the one the caller applied (a
-- failover that lost entries a worker had applied may be followed by others at the same
-- places: the versions agree, the stamps do not). Stamps are unique per write, and a
-- replica holds a prefix of its primary's log, so a matching entry vouches for all
-- before it.
local function reachable(version)
  if version < known then return false end
  if seen == '' or known == 0 then
    if version == known then return true end
    local first = redis.call('XRANGE', KEYS[2], (known + 1) .. '-0', '+', 'COUNT', 1)
    return #first == 1 and first[1][1] == (known + 1) .. '-0'
  end
  local got = redis.call('XRANGE', KEYS[2], known .. '-0', '+', 'COUNT', 2)
  if #got == 0 or got[1][1] ~= known .. '-0' or stamp_of(got[1][2]) ~= seen then
    return false
  end
  return version == known or (#got == 2 and got[2][1] == (known + 1) .. '-0')
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

-- a class index of this model
local function class_ok(y, k)
  local c = tonumber(y)
  return c ~= nil and c >= 0 and c < k and c == math.floor(c)
end

-- a binary instance (storage.codec) of this model: a known tag, whole entries (whole rows
-- of at most k classes for 'F') and its largest coordinate (the last: coordinates are
-- sorted) below n
local function instance_ok(x, n, k)
  local tag, len = string.sub(x, 1, 1), #x - 1
  local count, at = 0, 2
  if tag == 'F' then
    if len < 4 then return false end
    local r = struct.unpack('<i4', x, 2)
    if r < 1 or r > k or (len - 4) % (4 + 8 * r) ~= 0 then return false end
    count, at = (len - 4) / (4 + 8 * r), 6
    if count == 0 then return false end
  else
    local per = (tag == 'A' and 12) or (tag == 'E' and 16) or nil
    if per == nil or len % per ~= 0 then return false end
    count = len / per
    if count == 0 then return true end
  end
  local last = struct.unpack('<i4', x, at + 4 * (count - 1))
  return last >= 0 and last < n
end

if redis.call('HGET', meta, 'incarnation') ~= ARGV[1] then return {{'gone'}} end
-- the model's labels and input size (a model created before they were kept: unbounded)
local K = tonumber(redis.call('HGET', meta, 'k') or '') or 2^53
local N = tonumber(redis.call('HGET', meta, 'n') or '') or 2^31
"""

SYNC = (
    PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit
-- Reply: {'ok', version, folded, entries} | {'reload'} | {'gone'}
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[3])
return {'ok', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[4]))}
"""
)

PREDICT = (
    PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version (the one that predicted), 3 strict ('1': store only
-- if known is current), 4 label time-to-live in ms, 5 fold, 6 limit, 7 most pending trials,
-- then per item from 8: trial id, instance, predicted class, scores
-- KEYS[9..]: the trial hash of each item, in order
-- Reply: {'ok', version, folded, entries, results} with per item {'ok'} (stored),
-- {'existing', p, scores, v} (same instance already pending under that id), {'conflict'},
-- {'full'} (the model holds the most pending trials) or {'invalid'} (not this model's);
-- {'stale', version, folded, entries} when strict and known is not current
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[5])
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
local room = tonumber(ARGV[7]) - redis.call('ZCARD', KEYS[4])
local results, created = {}, 0
for i = 8, #ARGV, 4 do
  local key = KEYS[9 + (i - 8) / 4]
  local id, x = ARGV[i], ARGV[i + 1]
  local old = redis.call('HMGET', key, 'x', 'p', 's', 'v', 'y')
  if old[2] then
    if old[1] == x and not old[5] then
      results[#results + 1] = {'existing', old[2], old[3], old[4]}
    else
      results[#results + 1] = {'conflict'}
    end
  elseif not instance_ok(x, N, K) or not class_ok(ARGV[i + 2], K) then
    results[#results + 1] = {'invalid'}
  elseif room <= 0 then
    results[#results + 1] = {'full'}
  else
    local deadline = now + ttl
    redis.call('HSET', key, 'x', x, 'p', ARGV[i + 2], 's', ARGV[i + 3], 'v', known,
               'd', deadline)
    redis.call('PEXPIREAT', key, deadline + grace)
    redis.call('ZADD', KEYS[4], deadline, id)
    redis.call('ZADD', KEYS[5], deadline + grace, id)
    created = created + 1
    room = room - 1
    results[#results + 1] = {'ok'}
  end
end
if created > 0 then redis.call('HINCRBY', meta, 'predictions', created) end
return {'ok', version, num(meta, 'folded'), entries, results}
"""
)

LABEL = (
    PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, then per item from 5:
-- trial id, true class
-- KEYS[9..]: the trial hash of each item, in order
-- Reply: {'ok', version, folded, entries, results}, the entries being those before the
-- first applied item (the caller rebuilds its own from the results), with per item
-- {'ok', p, seq, x, v} (applied as log entry seq, of instance x served at version v),
-- {'repeat', p, seq, u} (this label was applied before; u may be '' while not yet
-- folded), {'conflict', y} (labelled otherwise), {'expired'}, {'unknown'}, {'invalid'}
-- (not a class of this model)
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[3])
local now = now_ms()
sweep(now)
local results, applied, first = {}, 0, version + 1
for i = 5, #ARGV, 2 do
  local key = KEYS[9 + (i - 5) / 2]
  local id, y = ARGV[i], ARGV[i + 1]
  local r = redis.call('HMGET', key, 'x', 'p', 'd', 'y', 'q', 'u', 'v')
  if not class_ok(y, K) then
    results[#results + 1] = {'invalid'}
  elseif not r[2] then
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
    -- v: the version that served the prediction (a backtest predicts there)
    redis.call('XADD', KEYS[2], version .. '-0', 'k', 'l', 't', id, 'x', r[1], 'y', y,
               'p', r[2], 'v', r[7] or '', 'w', stamp)
    redis.call('HSET', key, 'y', y, 'q', version)
    redis.call('HDEL', key, 'x', 's')
    redis.call('ZREM', KEYS[4], id)
    applied = applied + 1
    results[#results + 1] = {'ok', r[2], version, r[1], r[7] or ''}
  end
end
if applied > 0 then
  redis.call('HSET', meta, 'version', version)
  redis.call('HINCRBY', meta, 'labelled', applied)
end
return {'ok', version, num(meta, 'folded'), catchup(known, first - 1, tonumber(ARGV[4])),
        results}
"""
)

LEARN = (
    PRELUDE
    + """
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, 5 idempotency record lifetime
-- (ms), then groups from 6: idempotency key ('' for none), body hash, item count n, then
-- n items: instance, true class. KEYS[9..]: the record of each keyed group, in order.
-- Reply: {'ok', version, folded, entries, results}, the entries being those before the
-- first appended item (the caller has its own), per group {'ok', first seq} (appended),
-- {'repeat', first seq, n, incarnation, answer or ''} (the key was used for this body
-- before) or {'mismatch'} (the key was used for another body); {'invalid', group, item}
-- (an item is not this model's: nothing written)
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[3])
local groups, i, g, keyed = {}, 6, 0, 0
while i <= #ARGV do
  g = g + 1
  local key, n, rec = ARGV[i], tonumber(ARGV[i + 2]), nil
  if key ~= '' then
    keyed = keyed + 1
    rec = KEYS[8 + keyed]
  end
  groups[g] = {key = key, hash = ARGV[i + 1], n = n, at = i + 3, rec = rec}
  for j = 0, n - 1 do
    local x, y = ARGV[i + 3 + 2 * j], ARGV[i + 4 + 2 * j]
    if not instance_ok(x, N, K) or not class_ok(y, K) then return {'invalid', g, j + 1} end
  end
  i = i + 3 + 2 * n
end
local first, results, ttl = version + 1, {}, tonumber(ARGV[5])
for gi, grp in ipairs(groups) do
  local old = nil
  if grp.rec then
    old = redis.call('HMGET', grp.rec, 'op', 'h', 'a', 'n', 'inc', 'r')
  end
  if old and old[1] then
    if old[1] == 'learn' and old[2] == grp.hash then
      results[gi] = {'repeat', old[3], old[4], old[5], old[6] or ''}
    else
      results[gi] = {'mismatch'}
    end
  else
    local a = version + 1
    for j = 0, grp.n - 1 do
      version = version + 1
      if grp.rec then
        redis.call('XADD', KEYS[2], version .. '-0', 'k', 'n', 'x', ARGV[grp.at + 2 * j],
                   'y', ARGV[grp.at + 1 + 2 * j], 'i', grp.key, 'w', stamp)
      else
        redis.call('XADD', KEYS[2], version .. '-0', 'k', 'n', 'x', ARGV[grp.at + 2 * j],
                   'y', ARGV[grp.at + 1 + 2 * j], 'w', stamp)
      end
    end
    if grp.rec then
      redis.call('HSET', grp.rec, 'op', 'learn', 'h', grp.hash, 'a', a, 'n', grp.n,
                 'inc', ARGV[1])
      redis.call('PEXPIRE', grp.rec, ttl)
    end
    results[gi] = {'ok', a}
  end
end
if version >= first then
  redis.call('HSET', meta, 'version', version)
  redis.call('HINCRBY', meta, 'learned', version - first + 1)
end
return {'ok', version, num(meta, 'folded'), catchup(known, first - 1, tonumber(ARGV[4])),
        results}
"""
)
