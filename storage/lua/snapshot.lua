-- prelude: model
-- SNAPSHOT: keep a learner state as the model at a version, and trim the log.
-- KEYS: 1-8 those of every trial script (storage.scripts), then the keys of the outcomes
-- folded
-- ARGV: 1 incarnation, 2 the state's position (version and the stamp of its entry, as
-- the trial scripts take it), 3 state, 4 fold (outcomes up to that version at most),
-- 5 log entries to keep, 6 the input at that version (JSON; '' for the one it was made
-- with)
-- Reply: {'ok', snapshot version, folded} | {'unfolded', folded} (fold up to the version
-- first) | {'reload'} (the log at that version is not what the state was learned from)
-- Keeps the newer snapshot and trims the log to what follows it, but never below the
-- last ARGV[5] entries; the snapshot's own entry stays, so that a worker standing there
-- can still show its stamp.
local v = known
local cur = tonumber(redis.call('HGET', KEYS[3], 'version') or '-1')
if seen ~= '' and v > 0 then
  local e = redis.call('XRANGE', KEYS[2], v .. '-0', v .. '-0')
  if #e == 0 and v <= cur then  -- trimmed under a newer snapshot, folded past it
    return {'ok', cur, num(meta, 'folded')}
  end
  if #e == 0 or stamp_of(e[1][2]) ~= seen then return {'reload'} end
end
fold(ARGV[4])
local folded = num(meta, 'folded')
if folded < v then return {'unfolded', folded} end
if v > cur then
  redis.call('HSET', KEYS[3], 'version', v, 'state', ARGV[3], 'w', seen, 'c', ARGV[6])
  cur = v
end
local keep = math.min(cur, num(meta, 'version') - tonumber(ARGV[5]) + 1)
if keep > 1 then redis.call('XTRIM', KEYS[2], 'MINID', keep .. '-0') end
return {'ok', cur, folded}
