-- prelude: none
-- RESERVE: count a model against the quota of the key that makes it.
-- KEYS: 1 owners (a hash: model -> key id), 2 the key's owned models (a set)
-- ARGV: 1 model, 2 key id, 3 most models the key may own
-- Reply: 'new' | 'owned' | 'full'; nothing written but for 'new'
-- A model already owned (by any key) is not counted again: a retried create reserves
-- nothing new.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'owned' end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'full' end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 'new'
