-- limit_refund: give back tokens taken from a GCRA limiter and not used (a
-- limited queue's reserve that found fewer tasks than it took tokens for).
-- KEYS[1]  fleet:limit:<name>  string: the theoretical arrival time, server µs
-- ARGV[1]  the tokens to give back
-- ARGV[2]  the emission interval in µs
-- returns  1 when the arrival time moved back (the key is deleted when the
--          limiter is full again), 0 when there was nothing to give back
--          (the key is gone); a WRONGTYPE error, nothing changed, when the
--          key holds another type or a string that is no number
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local tat = tonumber(v)
if not tat then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds no arrival time')
end
local now = now_us()
local ntat = tat - tonumber(ARGV[1]) * tonumber(ARGV[2])
if ntat <= now then
  redis.call('DEL', KEYS[1])
else
  gcra_set(KEYS[1], ntat, now)
end
return 1
