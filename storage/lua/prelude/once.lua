-- The prelude of a keyed write that appends one entry (IMPORT, CHANGE), after the model
-- prelude: KEYS[9] its idempotency record, ARGV[6] the body's hash or '', ARGV[7] the
-- record's lifetime (ms). once(op) answers a retry as the first request was answered (or
-- a key used for another request), remember(op, seq) keeps the seq it wrote, and
-- mark(seq, what) notes the entry among the model's last MARKS changes (meta field
-- 'marks', a JSON list of [seq, what]) that a dashboard shows on the mistake curve.
local function mark(seq, what)
  local marks = cjson.decode(redis.call('HGET', meta, 'marks') or '[]')
  table.insert(marks, {seq, what})
  while #marks > MARKS do table.remove(marks, 1) end
  redis.call('HSET', meta, 'marks', cjson.encode(marks))
end
local function once(op)
  if ARGV[6] == '' then return nil end
  local old = redis.call('HMGET', KEYS[9], 'op', 'h', 'a', 'inc')
  if not old[1] then return nil end
  if old[1] == op and old[2] == ARGV[6] then return {'repeat', old[3], old[4]} end
  return {'mismatch'}
end
local function remember(op, seq)
  if ARGV[6] == '' then return end
  redis.call('HSET', KEYS[9], 'op', op, 'h', ARGV[6], 'a', seq, 'inc', ARGV[1])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[7]))
end
