"""The Lua scripts for whole models: create, delete, snapshots, imports and statistics.

Each script touches one slot: a model's keys, or the registry's. Creating a model is three
steps, deleting it three, and the registry (:class:`storage.keys.Registry`) agrees with
the models whatever crashes between them:

- create: :data:`REGISTER` lists the name with the new incarnation (or refuses: the
  registry is full) and marks it unsettled; :data:`CREATE` makes the model's keys;
  :data:`SETTLE` sets the name to the incarnation that exists (or none) and settles it.
- delete: :data:`UNSETTLE` marks the name unsettled; :data:`DELETE` removes the model's
  keys; :data:`SETTLE` removes the name if it still holds that incarnation.

Every write to a name's entry is conditional on the incarnation read before it, so a
create racing a delete never loses the newer model's entry. A name left unsettled by a
crash is settled by the sweep once it is older than any step can take: the entry then
names the incarnation in the model's meta, or nothing. Until then a listed name without
a model is skipped by readers, and counts toward the most models.

A delete removes a model's keys at once, except the trial hashes of a model with many
kept trials: those move to a grave (a sorted set, listed in the registry before the
delete runs) that :data:`SWEEP` empties a batch at a time, so no single step blocks Redis
for long and a crash leaves the rest listed for the next sweep. A grave is unlisted once
empty and once its model's meta holds another incarnation: then no delete can fill it.

Idempotency records (``KEYS`` named ``idem``) are hashes ``{op, h, ...}``: the operation,
a hash of the request's body, and what the first request did. A record with another
``op`` or ``h`` is a key reused for a different request.
"""

from __future__ import annotations

from storage.scripts import PRELUDE

MARKS = 64  # the changes of a model its meta lists, the latest

__all__ = [
    "CHANGE",
    "CREATE",
    "DELETE",
    "IDEM_ANSWER",
    "IMPORT",
    "REGISTER",
    "SETTLE",
    "SNAPSHOT",
    "STATS",
    "SUMMARY",
    "SWEEP",
    "UNSETTLE",
]

REGISTER = """
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 incarnation, 3 most models, 4 now (ms)
-- Reply: {'ok'} | {'full'}
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return {'full'}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return {'ok'}
"""

UNSETTLE = """
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 now (ms)
-- Reply: {'ok'}; a listed name is marked unsettled (a delete of it begins)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return {'ok'}
"""

SETTLE = """
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 the incarnation the caller saw listed ('' for none), 3 the one to
-- list ('' for none)
-- Reply: {'ok'} | {'changed'} (another create or delete listed the name meanwhile)
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return {'changed'} end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
redis.call('ZREM', KEYS[2], ARGV[1])
return {'ok'}
"""

CREATE = """
-- KEYS: 1-8 the model's fixed keys, 9 idempotency record (or a placeholder when ARGV[5]
-- is '')
-- ARGV: 1 incarnation, 2 config (JSON), 3 labels k, 4 input size n, 5 body hash or '',
-- 6 record lifetime (ms)
-- Reply: {'ok', created} | {'exists', incarnation} | {'repeat', created, incarnation} |
-- {'mismatch'}
if ARGV[5] ~= '' then
  local old = redis.call('HMGET', KEYS[9], 'op', 'h', 'created', 'inc')
  if old[1] then
    if old[1] == 'create' and old[2] == ARGV[5] then
      return {'repeat', old[3], old[4]}
    end
    return {'mismatch'}
  end
end
local inc = redis.call('HGET', KEYS[1], 'incarnation')
if inc then return {'exists', inc} end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'incarnation', ARGV[1], 'config', ARGV[2], 'created', t[1],
           'version', 0, 'folded', 0, 'mistakes', 0, 'curve_step', 1, 'k', ARGV[3],
           'n', ARGV[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[9], 'op', 'create', 'h', ARGV[5], 'created', t[1],
             'inc', ARGV[1])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[6]))
end
return {'ok', t[1]}
"""

DELETE = """
-- KEYS: 1-8 the model's fixed keys, 9 idempotency record (or a placeholder), 10 the
-- grave of incarnation ARGV[3], 11.. the trial hashes the caller read from KEYS[5]
-- ARGV: 1 body hash or '', 2 record lifetime (ms), 3 the incarnation the caller read
-- ('' for none), 4.. the trial ids of KEYS[11..]: deleted here if they are all the
-- model's trials (else every trial hash goes to the grave, for the sweep)
-- Reply: {'ok', graved} (1: the grave holds trial hashes to sweep) | {'repeat'} |
-- {'gone'} | {'mismatch'} | {'moved'} (the model's incarnation is not ARGV[4]: nothing
-- written, read it again)
if ARGV[1] ~= '' then
  local old = redis.call('HMGET', KEYS[9], 'op', 'h')
  if old[1] then
    if old[1] == 'delete' and old[2] == ARGV[1] then return {'repeat'} end
    return {'mismatch'}
  end
end
local inc = redis.call('HGET', KEYS[1], 'incarnation')
if not inc then return {'gone'} end
if inc ~= ARGV[3] then return {'moved'} end
local graved, every = 0, redis.call('ZCARD', KEYS[5]) == #ARGV - 3
for i = 4, #ARGV do
  if not every then break end
  every = redis.call('ZSCORE', KEYS[5], ARGV[i]) ~= false
end
if every then
  for i = 11, #KEYS do redis.call('DEL', KEYS[i]) end
  redis.call('DEL', KEYS[5])
else
  redis.call('RENAME', KEYS[5], KEYS[10])
  graved = 1
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8])
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[9], 'op', 'delete', 'h', ARGV[1])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[2]))
end
return {'ok', graved}
"""

SWEEP = """
-- KEYS: 1 a grave, 2.. trial hashes the caller read from it
-- ARGV: 1.. their trial ids, in order
-- Reply: {'ok', trial ids left in the grave}
for i, id in ipairs(ARGV) do
  if redis.call('ZSCORE', KEYS[1], id) then
    redis.call('DEL', KEYS[i + 1])
    redis.call('ZREM', KEYS[1], id)
  end
end
return {'ok', redis.call('ZCARD', KEYS[1])}
"""

IDEM_ANSWER = """
-- KEYS: 1 an idempotency record; ARGV: 1 body hash, 2 the first request's answer
-- Reply: {'ok'} if kept, {'gone'} if the record expired or is another request's
if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then return {'gone'} end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
return {'ok'}
"""

SNAPSHOT = (
    PRELUDE
    + """
-- KEYS: 1-8 those of every trial script (storage.scripts), then the keys of the outcomes
-- folded
-- ARGV: 1 incarnation, 2 the state's position (version and the stamp of its entry, as
-- the trial scripts take it), 3 state, 4 fold (outcomes up to that version at most),
-- 5 log entries to keep, 6 the input at that version (JSON; '' for the one it was made
-- with)
-- Reply: {'ok', snapshot version, folded} | {'unfolded', folded} (fold up to the version
-- first) | {'reload'} (the log at that version is not what the state was learned from)
-- Keeps the newer snapshot and trims the log to what follows it, but never below the
-- last ARGV[5] entries; the snapshot's own entry stays, so that a worker standing there
-- can still show its stamp.
local v = known
local cur = tonumber(redis.call('HGET', KEYS[3], 'version') or '-1')
if seen ~= '' and v > 0 then
  local e = redis.call('XRANGE', KEYS[2], v .. '-0', v .. '-0')
  if #e == 0 and v <= cur then  -- trimmed under a newer snapshot, folded past it
    return {'ok', cur, num(meta, 'folded')}
  end
  if #e == 0 or stamp_of(e[1][2]) ~= seen then return {'reload'} end
end
fold(ARGV[4])
local folded = num(meta, 'folded')
if folded < v then return {'unfolded', folded} end
if v > cur then
  redis.call('HSET', KEYS[3], 'version', v, 'state', ARGV[3], 'w', seen, 'c', ARGV[6])
  cur = v
end
local keep = math.min(cur, num(meta, 'version') - tonumber(ARGV[5]) + 1)
if keep > 1 then redis.call('XTRIM', KEYS[2], 'MINID', keep .. '-0') end
return {'ok', cur, folded}
"""
)

# A keyed write that appends one entry (KEYS[9] its record, ARGV[6] the body's hash or
# '', ARGV[7] the record's lifetime): ``once`` answers a retry as the first request was
# answered (or a key used for another request), ``remember`` keeps the seq it wrote, and
# ``mark`` notes the entry among the model's last MARKS changes (meta field 'marks', a
# JSON list of [seq, what]) that a dashboard shows on the mistake curve.
_ONCE = f"""
local function mark(seq, what)
  local marks = cjson.decode(redis.call('HGET', meta, 'marks') or '[]')
  table.insert(marks, {{seq, what}})
  while #marks > {MARKS} do table.remove(marks, 1) end
  redis.call('HSET', meta, 'marks', cjson.encode(marks))
end
local function once(op)
  if ARGV[6] == '' then return nil end
  local old = redis.call('HMGET', KEYS[9], 'op', 'h', 'a', 'inc')
  if not old[1] then return nil end
  if old[1] == op and old[2] == ARGV[6] then return {{'repeat', old[3], old[4]}} end
  return {{'mismatch'}}
end
local function remember(op, seq)
  if ARGV[6] == '' then return end
  redis.call('HSET', KEYS[9], 'op', op, 'h', ARGV[6], 'a', seq, 'inc', ARGV[1])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[7]))
end
"""

IMPORT = (
    PRELUDE
    + _ONCE
    + """
-- KEYS: 1-8 those of every trial script (storage.scripts), 9 idempotency record (or a
-- placeholder when ARGV[6] is ''), then the keys of the outcomes folded
-- ARGV: 1 incarnation, 2 known version, 3 state, 4 fold, 5 limit, 6 body hash or '',
-- 7 record lifetime (ms), 8 the model's input now (JSON; '' for the one it was made with),
-- 9 what it is, in a few words (for the model's marks), 10 the operation ('import' or
-- 'rollback', for its idempotency record)
-- Reply: {'ok', seq} | {'stale', version, folded, entries} (catch up, fold, retry) |
-- {'repeat', seq, incarnation} | {'mismatch'}
-- Replaces the learner state: appends a reset entry (k = r) at seq and keeps the state as
-- the snapshot at seq; workers that replay the reset entry reload from the snapshot. The
-- snapshot it replaces (or the creation, p_state '') is kept as the previous one (fields
-- p_*, with p_until = seq), so that the versions before seq can still be rebuilt while the
-- log holds them.
local earlier = once(ARGV[10])
if earlier then return earlier end
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[4])
if version ~= known or num(meta, 'folded') < known then
  return {'stale', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[5]))}
end
version = version + 1
redis.call('XADD', KEYS[2], version .. '-0', 'k', 'r', 'w', stamp)
local cur = redis.call('HMGET', KEYS[3], 'version', 'state', 'w', 'c')
if not cur[1] then cur = {0, '', '', ''} end  -- no snapshot yet: the creation
redis.call('HSET', KEYS[3], 'p_version', cur[1], 'p_state', cur[2], 'p_w', cur[3] or '',
           'p_c', cur[4] or '', 'p_until', version)
redis.call('HSET', KEYS[3], 'version', version, 'state', ARGV[3], 'w', stamp, 'c', ARGV[8])
redis.call('HSET', meta, 'version', version, 'folded', version)
redis.call('HINCRBY', meta, 'imports', 1)
remember(ARGV[10], version)
mark(version, ARGV[9])
return {'ok', version}
"""
)

CHANGE = (
    PRELUDE
    + _ONCE
    + """
-- KEYS: 1-8 those of every trial script (storage.scripts), 9 idempotency record (or a
-- placeholder when ARGV[6] is ''), then the keys of the outcomes folded
-- ARGV: 1 incarnation, 2 known version, 3 the change (JSON), 4 fold, 5 limit, 6 body
-- hash or '', 7 record lifetime (ms), 8 the input after the change (JSON), 9 labels k,
-- 10 input size n, 11 the input the caller checked the change against ('' as made),
-- 12 what changed, in a few words (for the model's marks)
-- Reply: {'ok', seq} | {'stale', version, folded, entries} (catch up, fold, retry) |
-- {'repeat', seq, incarnation} | {'mismatch'} | {'reload'}
-- Changes the model's input (experts, features, labels): appends a change entry (k = c)
-- at seq, which every worker replays in its place, and keeps the input after it (meta
-- field 'input') and the sizes the trial scripts check instances and labels against.
-- The caller checked the change against the model's input at ``known``: trials since
-- then leave it valid, another change does not (stale: catch up and check again). The
-- entry is folded as every entry is, with outcome 4 (no trial).
local earlier = once('change')
if earlier then return earlier end
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[4])
if (redis.call('HGET', meta, 'input') or '') ~= ARGV[11] then
  return {'stale', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[5]))}
end
version = version + 1
redis.call('XADD', KEYS[2], version .. '-0', 'k', 'c', 'c', ARGV[3], 'w', stamp)
redis.call('HSET', meta, 'version', version, 'input', ARGV[8], 'k', ARGV[9], 'n', ARGV[10])
redis.call('HINCRBY', meta, 'changes', 1)
remember('change', version)
mark(version, ARGV[12])
return {'ok', version}
"""
)

SUMMARY = (
    PRELUDE
    + """
-- KEYS: 1-8 those of every trial script (storage.scripts)
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
-- KEYS: 1-8 the model's fixed keys
-- ARGV: 1 now (ms), 2 the mark of the mistake curve the caller holds ('' for none)
-- Reply: {'ok', meta (flat field/value list), pending, overdue, curve, {window length,
--         its first point, its last point} ({0} when empty), summary version or '',
--         summary or '', the curve's mark} | {'gone'}
-- Reads what a dashboard shows in one step; the model's incarnation is not checked.
-- A curve holds the points at every step-th trial up to its last, each written once per
-- incarnation: the incarnation, the step, the length and the last point mark it. The
-- curve is sent as 'same' when its mark is the caller's; as '+' and the points after the
-- caller's when the caller's is of the same incarnation and step, no longer, and its last
-- point is still there (the caller's points begin it); else whole.
local meta = redis.call('HGETALL', KEYS[1])
if #meta == 0 then return {'gone'} end
local now = ARGV[1]
local at = redis.call('HMGET', KEYS[1], 'incarnation', 'curve_step')
local length = redis.call('LLEN', KEYS[6])
local head = (at[1] or '') .. '/' .. (at[2] or '') .. '/'
local mark = head .. length .. '/'
if length > 0 then mark = mark .. redis.call('LINDEX', KEYS[6], -1) end
local curve = 'same'
if mark ~= ARGV[2] then
  local held, last = nil, nil
  if string.sub(ARGV[2], 1, #head) == head then
    held, last = string.match(string.sub(ARGV[2], #head + 1), '^(%d+)/(.+)$')
    held = tonumber(held)
  end
  if held and held > 0 and held <= length
      and redis.call('LINDEX', KEYS[6], held - 1) == last then
    curve = redis.call('LRANGE', KEYS[6], held, -1)
    table.insert(curve, 1, '+')
  else
    curve = redis.call('LRANGE', KEYS[6], 0, -1)
  end
end
local summary = redis.call('HMGET', KEYS[8], 'version', 'doc')
local points = redis.call('LLEN', KEYS[7])
local window = {points}
if points > 0 then
  window = {points, redis.call('LINDEX', KEYS[7], 0), redis.call('LINDEX', KEYS[7], -1)}
end
return {'ok', meta,
        redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'),
        redis.call('ZCOUNT', KEYS[4], '-inf', now),
        curve, window, summary[1] or '', summary[2] or '', mark}
"""
