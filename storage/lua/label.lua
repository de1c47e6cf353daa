-- prelude: model
-- LABEL: apply each true class to its pending trial, at most once, as a log entry.
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, then per item from 5:
-- trial id, true class
-- KEYS[9..]: the trial key of each item, in order
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
local trials = trials_of((#ARGV - 4) / 2)
for i = 5, #ARGV, 2 do
  local key = KEYS[9 + (i - 5) / 2]
  local id, y = ARGV[i], ARGV[i + 1]
  local r = trials[key]
  if not class_ok(y, K) then
    results[#results + 1] = {'invalid'}
  elseif not r then
    results[#results + 1] = {'unknown'}
  elseif r.y ~= '' then
    if r.y == y then
      results[#results + 1] = {'repeat', r.p, r.q, r.u}
    else
      results[#results + 1] = {'conflict', r.y}
    end
  elseif now > tonumber(r.d) then
    redis.call('HINCRBY', meta, 'late_labels', 1)
    results[#results + 1] = {'expired'}
  else
    version = version + 1
    -- v: the version that served the prediction (a backtest predicts there)
    redis.call('XADD', KEYS[2], version .. '-0', 'k', 'l', 't', id, 'x', r.x, 'y', y,
               'p', r.p, 'v', r.v, 'w', stamp)
    r.y, r.q = y, version
    redis.call('SET', key, labelled(r), 'KEEPTTL')
    redis.call('ZADD', KEYS[5], kept_until(tonumber(r.d)), id)
    applied = applied + 1
    results[#results + 1] = {'ok', r.p, version, r.x, r.v}
  end
end
if applied > 0 then
  redis.call('HSET', meta, 'version', version)
  redis.call('HINCRBY', meta, 'labelled', applied)
end
return {'ok', version, num(meta, 'folded'), catchup(known, first - 1, tonumber(ARGV[4])),
        results}
