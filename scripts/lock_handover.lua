-- lock_handover: pass a held lock straight to a waiter of the same process,
-- in one round trip instead of a release and an acquire.
-- KEYS[1]  fleet:lock:<name>
-- KEYS[2]  fleet:fence:<name>   (derived, same slot)
-- ARGV[1]  the holder's token
-- ARGV[2]  the waiter's token
-- ARGV[3]  the waiter's hold in milliseconds
-- returns  the waiter's fencing token (as lock_acquire), or false, changing
--          nothing, when the holder no longer holds the lock
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = math.max(last + 1, now)
redis.call('SET', KEYS[2], string.format('%d', fence))
return string.format('%d', fence)
