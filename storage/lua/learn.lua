-- prelude: model
-- LEARN: append trials with known classes, each group once per idempotency key.
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit, 5 idempotency record lifetime
-- (ms), then groups from 6: idempotency key ('' for none), body hash, item count n, then
-- n items: instance, true class. KEYS[9..]: the record of each keyed group, in order.
-- Reply: {'ok', version, folded, entries, results}, the entries being those before the
-- first appended item (the caller has its own), per group {'ok', first seq} (appended),
-- {'repeat', first seq, n, incarnation, answer or ''} (the key was used for this body
-- before) or {'mismatch'} (the key was used for another body); {'invalid', group, item}
-- (an item is not this model's: nothing written)
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[3])
local groups, i, g, keyed = {}, 6, 0, 0
while i <= #ARGV do
  g = g + 1
  local key, n, rec = ARGV[i], tonumber(ARGV[i + 2]), nil
  if key ~= '' then
    keyed = keyed + 1
    rec = KEYS[8 + keyed]
  end
  groups[g] = {key = key, hash = ARGV[i + 1], n = n, at = i + 3, rec = rec}
  for j = 0, n - 1 do
    local x, y = ARGV[i + 3 + 2 * j], ARGV[i + 4 + 2 * j]
    if not instance_ok(x, N, K) or not class_ok(y, K) then return {'invalid', g, j + 1} end
  end
  i = i + 3 + 2 * n
end
local first, results, ttl = version + 1, {}, tonumber(ARGV[5])
for gi, grp in ipairs(groups) do
  local old = nil
  if grp.rec then
    old = redis.call('HMGET', grp.rec, 'op', 'h', 'a', 'n', 'inc', 'r')
  end
  if old and old[1] then
    if old[1] == 'learn' and old[2] == grp.hash then
      results[gi] = {'repeat', old[3], old[4], old[5], old[6] or ''}
    else
      results[gi] = {'mismatch'}
    end
  else
    local a = version + 1
    for j = 0, grp.n - 1 do
      version = version + 1
      if grp.rec then
        redis.call('XADD', KEYS[2], version .. '-0', 'k', 'n', 'x', ARGV[grp.at + 2 * j],
                   'y', ARGV[grp.at + 1 + 2 * j], 'i', grp.key, 'w', stamp)
      else
        redis.call('XADD', KEYS[2], version .. '-0', 'k', 'n', 'x', ARGV[grp.at + 2 * j],
                   'y', ARGV[grp.at + 1 + 2 * j], 'w', stamp)
      end
    end
    if grp.rec then
      redis.call('HSET', grp.rec, 'op', 'learn', 'h', grp.hash, 'a', a, 'n', grp.n,
                 'inc', ARGV[1])
      redis.call('PEXPIRE', grp.rec, ttl)
    end
    results[gi] = {'ok', a}
  end
end
if version >= first then
  redis.call('HSET', meta, 'version', version)
  redis.call('HINCRBY', meta, 'learned', version - first + 1)
end
return {'ok', version, num(meta, 'folded'), catchup(known, first - 1, tonumber(ARGV[4])),
        results}
