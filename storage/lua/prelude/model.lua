-- The prelude of the scripts of one model's trials, log and snapshots (storage.scripts):
-- KEYS[1..8] are the model's fixed keys, ARGV[1] its incarnation and ARGV[2] the
-- caller's position. It defines the helpers below, then answers {'gone'} for a model of
-- another incarnation and reads the model's labels K and input size N.
local meta = KEYS[1]

-- ARGV[2], where the caller stands: '<version>/<stamp of that entry>/<stamp for the
-- entries this call appends>', or a bare version
local function position(arg)
  local v, seen, stamp = string.match(arg, '^(%d+)/([^/]*)/([^/]*)$')
  if v then return tonumber(v), seen, stamp end
  return tonumber(arg), '', ''
end
local known, seen, stamp = position(ARGV[2])

-- the stamp of a log entry (XRANGE's flat field list); '' for an entry without one
local function stamp_of(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'w' then return fields[i + 1] end
  end
  return ''
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(key, field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

local function thin_curve(step)
  local pts = redis.call('LRANGE', KEYS[6], 0, -1)
  redis.call('DEL', KEYS[6])
  for _, pt in ipairs(pts) do
    if tonumber(string.match(pt, '^(%d+):')) % step == 0 then
      redis.call('RPUSH', KEYS[6], pt)
    end
  end
end

-- A trial is one string: '<p>:<v>:<d>:<y>:<q>:<u>:<length of x>:' and then its instance
-- x and its scores s. p is the class predicted, v the version that predicted it, d its
-- deadline (ms); once labelled, y is its class and q its log seq, and u its outcome once
-- folded (storage.scripts), x and s being dropped. It expires by itself (PXAT), its
-- grace after its deadline. KEYS[5] indexes every trial kept: by its deadline while it
-- is pending, by minus its purge time once labelled or expired.
-- The trial at key: nil when there is none, false when the key holds what the scripts
-- do not write.
local function trial_at(key)
  local raw = redis.pcall('GET', key)
  if not raw then return nil end
  if type(raw) == 'table' then  -- not a string: a trial kept as a hash
    if not string.find(raw.err, '^WRONGTYPE') then error(raw) end
    local h = redis.call('HMGET', key, 'x', 'p', 's', 'v', 'd', 'y', 'q', 'u')
    if not h[2] then return nil end
    return {x = h[1] or '', p = h[2], s = h[3] or '', v = h[4] or '', d = h[5] or '0',
            y = h[6] or '', q = h[7] or '', u = h[8] or ''}
  end
  local p, v, d, y, q, u, n, at = string.match(
    raw, '^(%d+):(%d*):(%d+):(%d*):(%d*):([0-4]?):(%d+):()')
  if not p or at + tonumber(n) - 1 > #raw then return false end
  local x_end = at + tonumber(n) - 1
  return {x = string.sub(raw, at, x_end), s = string.sub(raw, x_end + 1), p = p, v = v,
          d = d, y = y, q = q, u = u}
end

-- The trials of the call's n items (KEYS[9..8 + n]) by key, none for a key that holds
-- none, read before the call writes any: a key the scripts did not write refuses the
-- call whole. The call keeps the table up to date with what it writes, so an id that
-- comes twice finds what the call made of it.
local function trials_of(n)
  local out = {}
  for j = 1, n do
    local key = KEYS[8 + j]
    local t = trial_at(key)
    if t == false then
      error({err = 'CORRUPT the trial ' .. key .. ' is not one the scripts write'})
    end
    out[key] = t
  end
  return out
end

local function pending(t)
  return t.p .. ':' .. t.v .. ':' .. t.d .. '::::' .. #t.x .. ':' .. t.x .. t.s
end

local function labelled(t)
  return t.p .. ':' .. t.v .. ':' .. t.d .. ':' .. t.y .. ':' .. t.q .. ':' .. t.u .. ':0:'
end

local function fold(payload)
  if payload == '' then return end
  local f = cjson.decode(payload)
  -- the keys of the outcomes that name a trial or a record are the last KEYS, in order
  local named = 0
  for _, e in ipairs(f.e) do
    if e[4] ~= '' then named = named + 1 end
  end
  local at = #KEYS - named
  local folded, version = num(meta, 'folded'), num(meta, 'version')
  local mistakes, updates = num(meta, 'mistakes'), 0
  local quarantined, refused = 0, 0
  -- the confusion counts this fold adds, one HINCRBY per cell (in first-seen order)
  local cells, added = {}, {}
  local step = math.max(1, num(meta, 'curve_step'))
  local seq = f.a - 1
  for _, e in ipairs(f.e) do
    seq = seq + 1
    if seq > version then break end
    local key = nil
    if e[4] ~= '' then
      at = at + 1
      key = KEYS[at]
    end
    if seq == folded + 1 then
      local y, p, u, id = e[1], e[2], e[3], e[4]
      if u == 2 then
        quarantined = quarantined + 1
      elseif u == 4 then  -- a change of the model's input: no trial
      else
        if p ~= y then mistakes = mistakes + 1 end
        if u == 1 then updates = updates + 1 end
        if u == 3 then refused = refused + 1 end
        local cell = 'c:' .. y .. ':' .. p
        if added[cell] then
          added[cell] = added[cell] + 1
        else
          cells[#cells + 1], added[cell] = cell, 1
        end
      end
      if string.sub(id, 1, 1) == '!' then  -- a keyed learn: its record keeps the outcome
        local tail = ':idem:' .. string.sub(id, 2)
        if string.sub(key, -#tail) == tail and redis.call('EXISTS', key) == 1 then
          redis.call('HSET', key, 'o' .. seq, p .. ':' .. u)
        end
      elseif id ~= '' then
        local tail = ':' .. id
        if string.sub(key, -#tail) == tail then
          local trial = trial_at(key)
          if trial and trial.q == tostring(seq) then
            trial.u = u
            redis.call('SET', key, labelled(trial), 'KEEPTTL')
          end
        end
      end
      if seq % WINDOW_STEP == 0 then
        redis.call('RPUSH', KEYS[7], seq .. ':' .. mistakes)
        redis.call('LTRIM', KEYS[7], -WINDOW_POINTS, -1)
      end
      if seq % step == 0 then
        redis.call('RPUSH', KEYS[6], seq .. ':' .. mistakes)
        if redis.call('LLEN', KEYS[6]) > CURVE_POINTS then
          step = step * 2
          thin_curve(step)
        end
      end
      folded = seq
    end
  end
  for _, cell in ipairs(cells) do redis.call('HINCRBY', meta, cell, added[cell]) end
  redis.call('HSET', meta, 'folded', folded, 'mistakes', mistakes, 'curve_step', step)
  if updates > 0 then redis.call('HINCRBY', meta, 'updates', updates) end
  if quarantined > 0 then redis.call('HINCRBY', meta, 'quarantined', quarantined) end
  if refused > 0 then redis.call('HINCRBY', meta, 'refused', refused) end
end

-- whether the log still holds every entry after known and, when the caller gives the
-- stamp of its entry at known, whether that entry is the one the caller applied (a
-- failover that lost entries a worker had applied may be followed by others at the same
-- places: the versions agree, the stamps do not). Stamps are unique per write, and a
-- replica holds a prefix of its primary's log, so a matching entry vouches for all
-- before it.
local function reachable(version)
  if version < known then return false end
  if seen == '' or known == 0 then
    if version == known then return true end
    local first = redis.call('XRANGE', KEYS[2], (known + 1) .. '-0', '+', 'COUNT', 1)
    return #first == 1 and first[1][1] == (known + 1) .. '-0'
  end
  local got = redis.call('XRANGE', KEYS[2], known .. '-0', '+', 'COUNT', 2)
  if #got == 0 or got[1][1] ~= known .. '-0' or stamp_of(got[1][2]) ~= seen then
    return false
  end
  return version == known or (#got == 2 and got[2][1] == (known + 1) .. '-0')
end

-- the entries after known, up to upto, at most limit of them
local function catchup(known, upto, limit)
  if upto <= known or limit <= 0 then return {} end
  return redis.call('XRANGE', KEYS[2], (known + 1) .. '-0', upto .. '-0', 'COUNT', limit)
end

-- the index score of a trial labelled or expired: minus its purge time, or later (its
-- deadline plus the longest grace the model's trials had, meta field 'grace'); the index
-- forgets it once that time has passed
local longest_grace = nil
local function kept_until(deadline)
  if longest_grace == nil then longest_grace = math.max(num(meta, 'grace'), 60000) end
  return -(deadline + longest_grace)
end

-- pending trials past their deadline become expired, a few per call, kept until purged
local function sweep(now)
  local late = redis.call('ZRANGEBYSCORE', KEYS[5], 0, now, 'WITHSCORES', 'LIMIT', 0, 64)
  if #late > 0 then
    local moved = {}
    for i = 1, #late, 2 do
      moved[#moved + 1] = kept_until(tonumber(late[i + 1]))
      moved[#moved + 1] = late[i]
    end
    redis.call('ZADD', KEYS[5], unpack(moved))
    redis.call('HINCRBY', meta, 'expired', #late / 2)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], -now, '(0')
end

-- a class index of this model
local function class_ok(y, k)
  local c = tonumber(y)
  return c ~= nil and c >= 0 and c < k and c == math.floor(c)
end

-- a binary instance (storage.codec) of this model: a known tag, whole entries (whole rows
-- of at most k classes for 'F') and its largest coordinate (the last: coordinates are
-- sorted) below n
local function instance_ok(x, n, k)
  local tag, len = string.sub(x, 1, 1), #x - 1
  local count, at = 0, 2
  if tag == 'F' then
    if len < 4 then return false end
    local r = struct.unpack('<i4', x, 2)
    if r < 1 or r > k or (len - 4) % (4 + 8 * r) ~= 0 then return false end
    count, at = (len - 4) / (4 + 8 * r), 6
    if count == 0 then return false end
  else
    local per = (tag == 'A' and 12) or (tag == 'E' and 16) or nil
    if per == nil or len % per ~= 0 then return false end
    count = len / per
    if count == 0 then return true end
  end
  local last = struct.unpack('<i4', x, at + 4 * (count - 1))
  return last >= 0 and last < n
end

if redis.call('HGET', meta, 'incarnation') ~= ARGV[1] then return {'gone'} end
-- the model's labels and input size (a model created before they were kept: unbounded)
local K = tonumber(redis.call('HGET', meta, 'k') or '') or 2^53
local N = tonumber(redis.call('HGET', meta, 'n') or '') or 2^31
