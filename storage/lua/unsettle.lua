-- prelude: none
-- UNSETTLE: mark a listed name unsettled (a delete begins).
-- KEYS: 1 the registry's models, 2 its unsettled names
-- ARGV: 1 name, 2 now (ms)
-- Reply: {'ok'}; a listed name is marked unsettled (a delete of it begins)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return {'ok'}
