-- queue_nack: end a reservation that failed, if the reservation that exists
-- now is the caller's: schedule a retry after the backoff, or bury the task
-- in the dead letters (asked for, or no attempts left). The decision, the
-- backoff and the dead letters' bound follow the queue's stored policy, so
-- every process applies the same one; the caller's own options stand in
-- when none is stored.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms[ c]" (derived)
-- KEYS[4]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[5]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- KEYS[7]  fleet:queue:<name>:policy            string: the stored policy (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the new body: attempts counted, "error" set, no "dead_at"
-- ARGV[4]  attempts, as counted in the new body
-- ARGV[5]  '1' to bury the task whatever attempts are left, else '0'
-- ARGV[6]  the task's dedup key, or ''
-- ARGV[7..11]  the caller's max_attempts, backoff_base_ms, backoff_max_ms,
--          dead_max (0: none), and a random number in [0, 1) for the jitter
-- ARGV[12] the task's dead letter should it be cancelled (no "dead_at"):
--          '-' for ARGV[3] itself, '' when the caller has not made it (the
--          usual case). A task that Queue.Cancel asked to stop (canceled)
--          is buried with it, never retried
-- returns  {1, delay_ms} when retried, {1, -1} when buried, {1, -2} when
--          buried as cancelled; {2, 0} when cancelled but ARGV[12] is ''
--          (call again with it); {0, 0} when the lease is lost. On {0, 0}
--          and {2, 0} nothing changes
local err = wrong_types({'zset', 'hash', 'hash', 'zset', 'list', 'hash', 'string'})
if err then return err end
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not owned(v, v and redis.call('ZSCORE', KEYS[1], ARGV[1]), ARGV[2]) then
  return {0, 0}
end
local flagged = canceled(v)
if flagged and ARGV[12] == '' then
  return {2, 0}
end
local p = policy(KEYS[7], {max_attempts = tonumber(ARGV[7]), backoff_base_ms = tonumber(ARGV[8]),
  backoff_max_ms = tonumber(ARGV[9]), dead_max = tonumber(ARGV[10])})
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2]))) -- and the reserve call's record
local attempts = tonumber(ARGV[4])
local now = now_ms()
if flagged or ARGV[5] == '1' or attempts >= p.max_attempts then
  local dead = ARGV[3]
  if flagged and ARGV[12] ~= '-' then dead = ARGV[12] end
  redis.call('RPUSH', KEYS[5], with_dead_at(dead, now))
  if p.dead_max > 0 then
    redis.call('LTRIM', KEYS[5], -p.dead_max, -1)
  end
  if ARGV[6] ~= '' and redis.call('HGET', KEYS[6], ARGV[6]) == ARGV[1] then
    redis.call('HDEL', KEYS[6], ARGV[6])
  end
  if flagged then return {1, -2} end
  return {1, -1}
end
local d = p.backoff_base_ms * 2 ^ math.min(math.max(attempts - 1, 0), 40)
if d > p.backoff_max_ms then d = p.backoff_max_ms end
d = math.floor(d / 2 + tonumber(ARGV[11]) * d / 2)
redis.call('ZADD', KEYS[4], secs(now + d), ARGV[3])
return {1, d}
