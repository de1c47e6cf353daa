-- prelude: none
-- IDEM_ANSWER: keep the answer of the request an idempotency record is for.
-- KEYS: 1 an idempotency record; ARGV: 1 body hash, 2 the first request's answer
-- Reply: {'ok'} if kept, {'gone'} if the record expired or is another request's
if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then return {'gone'} end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
return {'ok'}
