-- prelude: none
-- RELEASE: a model is gone: its owner may make another.
-- KEYS: 1 owners (a hash: model -> key id), 2 the owner's owned models (a set)
-- ARGV: 1 model, 2 the owner's key id
-- Reply: 1 if released; 0 (nothing written) if the model had another owner, or none, by
-- then
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
