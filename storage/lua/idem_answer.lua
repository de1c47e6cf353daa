-- prelude: none
-- IDEM_ANSWER: keep the answers of the requests idempotency records are for.
-- KEYS: the idempotency records; ARGV: for each record in order, the body hash of its
-- request then that request's first answer
-- Reply: {'ok'} if every answer was kept, {'gone'} if a record expired or is another
-- request's (the others are kept)
local gone = false
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'h') == ARGV[2 * i - 1] then
    redis.call('HSET', KEYS[i], 'r', ARGV[2 * i])
  else
    gone = true
  end
end
if gone then return {'gone'} end
return {'ok'}
