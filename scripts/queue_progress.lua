-- queue_progress: store a running task's progress value (Task.Progress),
-- if the reservation that exists now is the caller's (owned), as the
-- caller's lease token and the value: Lookup shows it only while that
-- reservation holds the task.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the value (JSON)
-- returns  DONE, or LOST (nothing changes)
local id, token = ARGV[1], ARGV[2]
if not owns(id, token) then return LOST end
redis.call('HSET', PROGRESS, id, token .. ' ' .. ARGV[3])
return DONE
