-- queue_dead_purge: delete every dead letter.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- returns  how many were deleted
local t = redis.call('TYPE', DEAD).ok
if t ~= 'none' and t ~= 'list' then
  return redis.error_reply('WRONGTYPE ' .. DEAD .. ' holds a ' .. t .. ', not a list')
end
local n = redis.call('LLEN', DEAD)
redis.call('DEL', DEAD)
return n
