-- prelude: model, once
-- ALERT: raise one of a model's alerts once, whichever worker detects it first; or set
-- the model's alert config.
-- KEYS: 1-8 those of every trial script (storage.scripts), 9 the model's alerts hash
-- ARGV: 1 incarnation, 2 '0' (no position), 3 'raise' or 'configure', 4 the alert's id
-- ('<seq>:<what>'; configure: the config, JSON), 5 its seq, 6 '' (no idempotency), 7
-- its mark on the curve, 8 the most alerts kept
-- Reply: {'new', config or ''} (raised here) | {'raised'} (raised before) | {'ok'}
-- (configured) | {'gone'}
-- The hash belongs to incarnation 'inc': one of a deleted incarnation is emptied first.
-- 'raised' lists the latest alerts as [seq, id], by seq; an alert older than every one
-- kept when the list is full counts as raised, so none is ever raised twice.
local alerts = KEYS[9]
if redis.call('HGET', alerts, 'inc') ~= ARGV[1] then
  redis.call('DEL', alerts)
  redis.call('HSET', alerts, 'inc', ARGV[1])
end
if ARGV[3] == 'configure' then
  redis.call('HSET', alerts, 'config', ARGV[4])
  return {'ok'}
end
local raised = cjson.decode(redis.call('HGET', alerts, 'raised') or '[]')
local seq, most = tonumber(ARGV[5]), tonumber(ARGV[8])
if #raised >= most and seq < raised[1][1] then return {'raised'} end
local at = #raised + 1
for i, r in ipairs(raised) do
  if r[2] == ARGV[4] then return {'raised'} end
  if r[1] > seq and at > i then at = i end
end
table.insert(raised, at, {seq, ARGV[4]})
while #raised > most do table.remove(raised, 1) end
redis.call('HSET', alerts, 'raised', cjson.encode(raised))
mark(seq, ARGV[7])
return {'new', redis.call('HGET', alerts, 'config') or ''}
