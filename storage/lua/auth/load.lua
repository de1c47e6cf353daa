-- prelude: none
-- LOAD: the key table and its version, read in one step.
-- KEYS: 1 version (a counter), 2 table (a hash: key id -> record)
-- Reply: {version or '', the table as a flat field/value list}; writes nothing
return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2])}
