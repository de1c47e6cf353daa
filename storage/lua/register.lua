-- prelude: none
-- REGISTER: list a name with a new incarnation in the registry (a create begins).
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 incarnation, 3 most models, 4 now (ms)
-- Reply: {'ok'} | {'full'}
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return {'full'}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return {'ok'}
