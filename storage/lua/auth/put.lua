-- prelude: none
-- PUT: store a key's record and bump the table's version.
-- KEYS: 1 version (a counter), 2 table (a hash: key id -> record)
-- ARGV: 1 key id, 2 record (JSON)
-- Reply: the new version
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[1])
