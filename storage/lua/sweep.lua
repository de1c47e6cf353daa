-- prelude: none
-- SWEEP: delete a batch of a grave's trial keys.
-- KEYS: 1 a grave, 2.. trial keys the caller read from it
-- ARGV: 1.. their trial ids, in order
-- Reply: {'ok', trial ids left in the grave}
for i, id in ipairs(ARGV) do
  if redis.call('ZSCORE', KEYS[1], id) then
    redis.call('DEL', KEYS[i + 1])
    redis.call('ZREM', KEYS[1], id)
  end
end
return {'ok', redis.call('ZCARD', KEYS[1])}
