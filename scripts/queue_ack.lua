-- queue_ack: end a reservation for good (the task is done), if the caller's
-- lease is still the task's.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- KEYS[4]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the task's dedup key, or ''
-- returns  1 when acked; 0 when the lease is lost (the task was re-queued,
--          and perhaps reserved by another): then nothing changes
local err = wrong_types({'zset', 'hash', 'hash', 'hash'})
if err then return err end
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[3] ~= '' and redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[1] then
  redis.call('HDEL', KEYS[4], ARGV[3])
end
return 1
