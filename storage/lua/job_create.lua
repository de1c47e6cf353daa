-- prelude: none
-- JOB_CREATE: make a job unless its id is taken (storage.jobs).
-- KEYS: 1 the job's hash
-- ARGV: 1 the job's document (JSON), 2 the digest of the request that made it, 3 the
-- job's lifetime (ms)
-- Reply: nil when made; else the taken job's {doc, digest}, nothing written
if redis.call('HSETNX', KEYS[1], 'doc', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'digest', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return false
end
return redis.call('HMGET', KEYS[1], 'doc', 'digest')
