-- prelude: none
-- STATS: read what a dashboard shows, in one step.
-- KEYS: 1-8 the model's fixed keys
-- ARGV: 1 now (ms), 2 the mark of the mistake curve the caller holds ('' for none)
-- Reply: {'ok', meta (flat field/value list), pending, overdue, curve, {window length,
--         its first point, its last point} ({0} when empty), summary version or '',
--         summary or '', the curve's mark} | {'gone'}
-- Reads what a dashboard shows in one step; the model's incarnation is not checked.
-- A curve holds the points at every step-th trial up to its last, each written once per
-- incarnation: the incarnation, the step, the length and the last point mark it. The
-- curve is sent as 'same' when its mark is the caller's; as '+' and the points after the
-- caller's when the caller's is of the same incarnation and step, no longer, and its last
-- point is still there (the caller's points begin it); else whole.
local meta = redis.call('HGETALL', KEYS[1])
if #meta == 0 then return {'gone'} end
local now = ARGV[1]
local at = redis.call('HMGET', KEYS[1], 'incarnation', 'curve_step')
local length = redis.call('LLEN', KEYS[6])
local head = (at[1] or '') .. '/' .. (at[2] or '') .. '/'
local mark = head .. length .. '/'
if length > 0 then mark = mark .. redis.call('LINDEX', KEYS[6], -1) end
local curve = 'same'
if mark ~= ARGV[2] then
  local held, last = nil, nil
  if string.sub(ARGV[2], 1, #head) == head then
    held, last = string.match(string.sub(ARGV[2], #head + 1), '^(%d+)/(.+)$')
    held = tonumber(held)
  end
  if held and held > 0 and held <= length
      and redis.call('LINDEX', KEYS[6], held - 1) == last then
    curve = redis.call('LRANGE', KEYS[6], held, -1)
    table.insert(curve, 1, '+')
  else
    curve = redis.call('LRANGE', KEYS[6], 0, -1)
  end
end
local summary = redis.call('HMGET', KEYS[8], 'version', 'doc')
local points = redis.call('LLEN', KEYS[7])
local window = {points}
if points > 0 then
  window = {points, redis.call('LINDEX', KEYS[7], 0), redis.call('LINDEX', KEYS[7], -1)}
end
return {'ok', meta,
        redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf'),
        redis.call('ZCOUNT', KEYS[5], 0, now),
        curve, window, summary[1] or '', summary[2] or '', mark}
