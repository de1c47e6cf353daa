-- prelude: none
-- REVOKE: remove a key's record and bump the table's version, unless it is the last
-- admin key on every model.
-- KEYS: 1 version (a counter), 2 table (a hash: key id -> record)
-- ARGV: 1 key id
-- Reply: 'revoked' | 'none' (no such key) | 'last admin' (the key is an admin on every
-- model, '*', and no other is: revoking it would leave nobody to manage keys); nothing
-- written but for 'revoked'
-- Checked and done in one step, so two admins revoking each other at once leave one of
-- them. A record that is not JSON counts as no admin.
local function admin_everywhere(raw)
  local ok, doc = pcall(cjson.decode, raw)
  return ok and type(doc) == 'table' and doc.scope == 'admin' and doc.models == '*'
end
local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return 'none' end
if admin_everywhere(record) then
  local other = false
  local flat = redis.call('HGETALL', KEYS[2])
  for i = 1, #flat, 2 do
    if flat[i] ~= ARGV[1] and admin_everywhere(flat[i + 1]) then
      other = true
      break
    end
  end
  if not other then return 'last admin' end
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[1])
return 'revoked'
