-- prelude: model
-- PREDICT: keep each prediction as a pending trial until its label or its deadline.
-- ARGV: 1 incarnation, 2 known version (the one that predicted), 3 strict ('1': store only
-- if known is current), 4 label time-to-live in ms, 5 fold, 6 limit, 7 most pending trials,
-- then per item from 8: trial id, instance, predicted class, scores
-- KEYS[9..]: the trial key of each item, in order
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
local room = tonumber(ARGV[7]) - redis.call('ZCOUNT', KEYS[5], 0, '+inf')
-- the index entries of the trials made, added by one ZADD per 1,000
local results, created, index = {}, 0, {}
local trials = trials_of((#ARGV - 7) / 4)
for i = 8, #ARGV, 4 do
  local key = KEYS[9 + (i - 8) / 4]
  local id, x = ARGV[i], ARGV[i + 1]
  local old = trials[key]
  if old then
    if old.x == x and old.y == '' then
      results[#results + 1] = {'existing', old.p, old.s, old.v}
    else
      results[#results + 1] = {'conflict'}
    end
  elseif not instance_ok(x, N, K) or not class_ok(ARGV[i + 2], K) then
    results[#results + 1] = {'invalid'}
  elseif room <= 0 then
    results[#results + 1] = {'full'}
  else
    local deadline = now + ttl
    local made = {x = x, p = ARGV[i + 2], s = ARGV[i + 3], v = tostring(known),
                  d = tostring(deadline), y = '', q = '', u = ''}
    redis.call('SET', key, pending(made), 'PXAT', deadline + grace)
    trials[key] = made
    index[#index + 1], index[#index + 2] = deadline, id
    created = created + 1
    room = room - 1
    results[#results + 1] = {'ok'}
  end
end
for at = 1, #index, 2000 do
  redis.call('ZADD', KEYS[5], unpack(index, at, math.min(at + 1999, #index)))
end
if created > 0 then
  redis.call('HINCRBY', meta, 'predictions', created)
  -- the longest grace of the model's trials, for the sweep
  if grace > num(meta, 'grace') then redis.call('HSET', meta, 'grace', grace) end
end
return {'ok', version, num(meta, 'folded'), entries, results}
