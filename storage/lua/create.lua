-- prelude: none
-- CREATE: make a model's keys.
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
