-- queue_extend: push a reservation's deadline to now + lease, if the caller's
-- lease is still the task's.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[2]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  lease in milliseconds
-- returns  the new deadline in unix milliseconds; 0 when the lease is lost
--          (then nothing changes)
local err = wrong_types({'zset', 'hash'})
if err then return err end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], 'XX', string.format('%.3f', deadline / 1000), ARGV[1])
return deadline
