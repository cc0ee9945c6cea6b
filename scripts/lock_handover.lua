-- lock_handover: pass a held lock straight to a waiter of the same process,
-- in one round trip instead of a release and an acquire.
-- KEYS[1]  fleet:lock:<name>
-- KEYS[2]  fleet:fence:<name>   (derived, same slot)
-- ARGV[1]  the holder's token
-- ARGV[2]  the waiter's token
-- ARGV[3]  the waiter's hold in milliseconds
-- ARGV[4]  the fence key's lifetime in milliseconds, max(hold, 24 h)
-- returns  the waiter's fencing token (as lock_acquire; an odd fence stays
--          odd for the next acquire to check the tombstones), or false,
--          changing nothing, when the holder no longer holds the lock; a
--          WRONGTYPE error, nothing changed, when the lock or the fence key
--          holds another type (or the fence is not an integer)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
local f = redis.pcall('INCRBY', KEYS[2], 2)
if type(f) == 'table' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not an integer fence: ' .. tostring(f.err))
end
if f < 3000000000000000 then
  f = fence_seed(f)
  redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ARGV[4])
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return string.format('%d', f)
