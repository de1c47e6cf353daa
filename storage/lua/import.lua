-- prelude: model, once
-- IMPORT: replace the learner state (a state import or a rollback).
-- KEYS: 1-8 those of every trial script (storage.scripts), 9 idempotency record (or a
-- placeholder when ARGV[6] is ''), then the keys of the outcomes folded
-- ARGV: 1 incarnation, 2 known version, 3 state, 4 fold, 5 limit, 6 body hash or '',
-- 7 record lifetime (ms), 8 the model's input now (JSON; '' for the one it was made with),
-- 9 what it is, in a few words (for the model's marks), 10 the operation ('import' or
-- 'rollback', for its idempotency record)
-- Reply: {'ok', seq} | {'stale', version, folded, entries} (catch up, fold, retry) |
-- {'repeat', seq, incarnation} | {'mismatch'}
-- Replaces the learner state: appends a reset entry (k = r) at seq and keeps the state as
-- the snapshot at seq, with the model's input ARGV[8] (which also names the learner and
-- the challengers the state holds, and becomes the model's); workers that replay the
-- reset entry reload from the snapshot. The
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
redis.call('HSET', meta, 'version', version, 'folded', version, 'input', ARGV[8])
redis.call('HINCRBY', meta, 'imports', 1)
remember(ARGV[10], version)
mark(version, ARGV[9])
return {'ok', version}
