-- queue_snooze: end a reservation without counting an attempt, if the
-- reservation that exists now is the caller's: the body goes, unchanged,
-- to :scheduled, due after a delay (the handler was rate limited: the task
-- did not fail, it must wait). A task that Queue.Cancel asked to stop
-- (canceled) is buried instead, as cancelled: it never runs again.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms[ c]" (derived)
-- KEYS[4]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[5]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the delay in milliseconds (>= 0), from the server's clock
-- ARGV[4]  the task's dead letter should it be cancelled (no "dead_at"),
--          or '' when the caller has not made it (the usual case)
-- ARGV[5]  the task's dedup key, or ''
-- returns  the task's ready_at in unix milliseconds; -1 when buried as
--          cancelled; -2 when cancelled but ARGV[4] is '' (call again with
--          it); 0 when the lease is lost. On 0 and -2 nothing changes
local err = wrong_types({'zset', 'hash', 'hash', 'zset', 'list', 'hash'})
if err then return err end
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not owned(v, v and redis.call('ZSCORE', KEYS[1], ARGV[1]), ARGV[2]) then
  return 0
end
local flagged = canceled(v)
if flagged and ARGV[4] == '' then
  return -2
end
local body = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2]))) -- and the reserve call's record
if flagged then
  redis.call('RPUSH', KEYS[5], with_dead_at(ARGV[4], now_ms()))
  if ARGV[5] ~= '' and redis.call('HGET', KEYS[6], ARGV[5]) == ARGV[1] then
    redis.call('HDEL', KEYS[6], ARGV[5])
  end
  return -1
end
local at = now_ms() + tonumber(ARGV[3])
if body then
  redis.call('ZADD', KEYS[4], secs(at), body)
end
return at
