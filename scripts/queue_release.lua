-- queue_release: end a reservation without counting an attempt, if the
-- reservation that exists now is the caller's: the body goes back,
-- unchanged, to the head of the queue (it was interrupted, not failed).
-- A task that Queue.Cancel asked to stop (canceled) is buried instead, as
-- cancelled: it never runs again.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms[ c]" (derived)
-- KEYS[5]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the task's dead letter should it be cancelled (no "dead_at"),
--          or '' when the caller has not made it (the usual case: only a
--          cancelled task needs it)
-- ARGV[4]  the task's dedup key, or ''
-- returns  1 when released; 2 when buried as cancelled; 3 when cancelled
--          but ARGV[3] is '' (call again with it); 0 when the lease is
--          lost. On 0 and 3 nothing changes
local err = wrong_types({'list', 'zset', 'hash', 'hash', 'list', 'hash'})
if err then return err end
local v = redis.call('HGET', KEYS[4], ARGV[1])
if not owned(v, v and redis.call('ZSCORE', KEYS[2], ARGV[1]), ARGV[2]) then
  return 0
end
local flagged = canceled(v)
if flagged and ARGV[3] == '' then
  return 3
end
local body = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1], record(prefix_of(ARGV[2]))) -- and the reserve call's record
if flagged then
  redis.call('RPUSH', KEYS[5], with_dead_at(ARGV[3], now_ms()))
  if ARGV[4] ~= '' and redis.call('HGET', KEYS[6], ARGV[4]) == ARGV[1] then
    redis.call('HDEL', KEYS[6], ARGV[4])
  end
  return 2
end
if body then
  redis.call('LPUSH', KEYS[1], body)
end
return 1
