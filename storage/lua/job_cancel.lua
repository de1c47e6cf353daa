-- prelude: none
-- JOB_CANCEL: ask a job that exists to stop (storage.jobs).
-- KEYS: 1 the job's hash
-- Reply: the job's document; nil (nothing written) when there is no such job
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], 'cancel', '1')
return redis.call('HGET', KEYS[1], 'doc')
