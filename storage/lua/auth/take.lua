-- prelude: none
-- TAKE: take between need and want tokens from one of a key's rate buckets.
-- KEYS: 1 the key's buckets (a hash of its own slot, {rate:<key id>})
-- ARGV: 1 bucket name, 2 rate (tokens/s), 3 capacity, 4 tokens wanted, 5 tokens needed
-- at least
-- Reply: {granted, left, wait ms} as strings (Lua numbers would be truncated to integers):
-- granted '0' when fewer than need are there, wait then the time until they are
-- The bucket refills at rate by Redis's clock (so every worker and host agrees), up to
-- capacity, and is kept in the hash as fields '<name>:n' (tokens) and '<name>:at' (when,
-- in ms). A refusal takes nothing but stamps the bucket with its refilled count. Either
-- way the hash expires a second after an empty bucket would be full again.
local rate, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
local want, need = tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n_field, at_field = ARGV[1] .. ':n', ARGV[1] .. ':at'
local got = redis.call('HMGET', KEYS[1], n_field, at_field)
local tokens, at = tonumber(got[1]), tonumber(got[2])
if tokens == nil or at == nil then tokens, at = cap, now end
tokens = math.min(cap, tokens + math.max(0, now - at) * rate / 1000)
if tokens < need then
  redis.call('HSET', KEYS[1], n_field, tostring(tokens), at_field, tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
  return {'0', tostring(tokens), tostring((need - tokens) * 1000 / rate)}
end
local grant = math.min(want, math.floor(tokens))
tokens = tokens - grant
redis.call('HSET', KEYS[1], n_field, tostring(tokens), at_field, tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return {tostring(grant), tostring(tokens), '0'}
