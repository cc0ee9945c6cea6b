-- queue_extend: push a reservation's deadline to now + lease, if the
-- reservation that exists now is the caller's (owned in lib_queue.lua),
-- and say whether Queue.Cancel asked for the task to stop (its lease entry
-- ends in " c", which the new entry keeps): the holder hears of a cancel
-- whose message it missed (pub/sub keeps nothing) at its next extension.
-- No TYPE checks: HGET and ZSCORE read both keys first, refusing a wrong
-- type.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  lease in milliseconds
-- returns  {DONE, the new deadline in unix ms}; {CANCELED, the new
--          deadline} when the task was cancelled (extended all the same,
--          so that the holder can wind down); {LOST, 0} when the lease is
--          lost (then nothing changes)
local v = redis.call('HGET', LEASE, ARGV[1])
if not owned(v, v and redis.call('ZSCORE', PROCESSING, ARGV[1]), ARGV[2]) then
  return {LOST, 0}
end
local deadline = now_ms() + tonumber(ARGV[3])
local entry = lease_entry(ARGV[2], deadline)
local flagged = canceled(v)
if flagged then entry = entry .. ' c' end
redis.call('ZADD', PROCESSING, 'XX', secs(deadline), ARGV[1])
redis.call('HSET', LEASE, ARGV[1], entry)
if flagged then return {CANCELED, deadline} end
return {DONE, deadline}
