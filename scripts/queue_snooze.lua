-- queue_snooze: end a reservation without counting an attempt, if the
-- reservation that exists now is the caller's: the body goes, unchanged,
-- to :scheduled, due after a delay (the handler was rate limited: the task
-- did not fail, it must wait).
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- KEYS[4]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the delay in milliseconds (>= 0), from the server's clock
-- returns  the task's ready_at in unix milliseconds; 0 when the lease is
--          lost: then nothing changes
local err = wrong_types({'zset', 'hash', 'hash', 'zset'})
if err then return err end
if not owns(KEYS[1], KEYS[3], ARGV[1], ARGV[2]) then
  return 0
end
local body = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2]))) -- and the reserve call's record
local at = now_ms() + tonumber(ARGV[3])
if body then
  redis.call('ZADD', KEYS[4], secs(at), body)
end
return at
