-- lock_handover: pass a held lock straight to a waiter of the same process,
-- in one round trip instead of a release and an acquire.
-- KEYS[1]  fleet:lock:<name>
-- KEYS[2]  fleet:fence:<name>   (derived, same slot)
-- ARGV[1]  the holder's token
-- ARGV[2]  the waiter's token
-- ARGV[3]  the waiter's hold in milliseconds
-- returns  the waiter's fencing token (as lock_acquire), or false, changing
--          nothing, when the holder no longer holds the lock; a WRONGTYPE
--          error, nothing changed, when the fence holds something else
local last = redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('TYPE', KEYS[2]).ok
if not last then
  return false
end
if last ~= 'string' and last ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' holds a ' .. last .. ', not a string')
end
local prev = redis.call('GET', KEYS[2])
if prev and not tonumber(prev) then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not an integer')
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = math.max((tonumber(prev) or 0) + 1, now)
redis.call('SET', KEYS[2], string.format('%d', fence))
return string.format('%d', fence)
