-- prelude: none
-- DELETE: remove a model's keys (its many trials to a grave).
-- KEYS: 1-8 the model's fixed keys, 9 idempotency record (or a placeholder), 10 the
-- grave of incarnation ARGV[3], 11.. the trial keys the caller read from KEYS[5]
-- ARGV: 1 body hash or '', 2 record lifetime (ms), 3 the incarnation the caller read
-- ('' for none), 4.. the trial ids of KEYS[11..]: deleted here if they are all the
-- model's trials (else every trial key goes to the grave, for the sweep)
-- Reply: {'ok', graved} (1: the grave holds trial keys to sweep) | {'repeat'} |
-- {'gone'} | {'mismatch'} | {'moved'} (the model's incarnation is not ARGV[3]: nothing
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
