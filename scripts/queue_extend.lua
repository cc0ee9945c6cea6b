-- queue_extend: push a reservation's deadline to now + lease, if the
-- reservation that exists now is the caller's (owns in lib_queue.lua).
-- No TYPE checks: owns reads both keys first, refusing a wrong type.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[2]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  lease in milliseconds
-- returns  the new deadline in unix milliseconds; 0 when the lease is lost
--          (then nothing changes)
if not owns(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then
  return 0
end
local deadline = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], 'XX', secs(deadline), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], lease_entry(ARGV[2], deadline))
return deadline
