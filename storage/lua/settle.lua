-- prelude: none
-- SETTLE: make a name's registry entry name the incarnation that exists.
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 the incarnation the caller saw listed ('' for none), 3 the one to
-- list ('' for none)
-- Reply: {'ok'} | {'changed'} (another create or delete listed the name meanwhile)
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return {'changed'} end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
redis.call('ZREM', KEYS[2], ARGV[1])
return {'ok'}
