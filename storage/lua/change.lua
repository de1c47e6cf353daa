-- prelude: model, once
-- CHANGE: change the model's input (experts, features, labels).
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
