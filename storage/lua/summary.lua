-- prelude: model
-- SUMMARY: keep the newer learner summary.
-- KEYS: 1-8 those of every trial script (storage.scripts)
-- ARGV: 1 incarnation, 2 version the summary describes, 3 summary (JSON)
-- Reply: {'ok'}; keeps the newer of the stored and the given summary
local cur = tonumber(redis.call('HGET', KEYS[8], 'version') or '-1')
if tonumber(ARGV[2]) > cur then
  redis.call('HSET', KEYS[8], 'version', ARGV[2], 'doc', ARGV[3])
end
return {'ok'}
