-- queue_ack: end a reservation for good (the task is done), if the
-- reservation that exists now is the caller's (owns in lib_queue.lua).
-- No TYPE checks: HGET and ZSCORE refuse a wrong-type lease hash or
-- :processing, and the first write (HDEL of the body) a wrong-type body
-- hash, before anything changes.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- KEYS[4]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the task's dedup key, or ''
-- returns  1 when acked; 0 when the lease is lost (the task was re-queued,
--          and perhaps reserved by another): then nothing changes
if not owns(KEYS[1], KEYS[3], ARGV[1], ARGV[2]) then
  return 0
end
local holder = false
if ARGV[3] ~= '' then
  holder = redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[1]
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
-- The reserve call's record goes too: an ack proves its caller got the reply.
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2])))
if holder then
  redis.call('HDEL', KEYS[4], ARGV[3])
end
return 1
