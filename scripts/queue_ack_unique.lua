-- queue_ack_unique: queue_ack.lua for a task whose body carries
-- "unique_ms" (SubmitOptions.UniqueFor): when the task holds its dedup key,
-- the key moves from :dedup to :unique:<key> for the window, instead of
-- being freed. A task without the field is acked by queue_ack.lua.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- KEYS[4]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- KEYS[5]  fleet:queue:<name>:unique:<key>      string: id, PX window (optional)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the task's dedup key
-- ARGV[4]  the window in milliseconds (> 0)
-- returns  1 when acked; 0 when the lease is lost: then nothing changes
if not owns(KEYS[1], KEYS[3], ARGV[1], ARGV[2]) then
  return 0
end
local holder = redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[1]
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2])))
if holder then
  redis.call('HDEL', KEYS[4], ARGV[3])
  redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[4])
end
return 1
