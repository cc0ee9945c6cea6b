-- queue_dead_purge: delete every dead letter.
-- KEYS[1]  fleet:queue:<name>:dead  list: dead letters
-- returns  how many were deleted
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'none' and t ~= 'list' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', not a list')
end
local n = redis.call('LLEN', KEYS[1])
redis.call('DEL', KEYS[1])
return n
