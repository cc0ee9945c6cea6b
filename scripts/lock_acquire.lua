-- lock_acquire: take a lock if it is free and hand out a fencing token.
-- KEYS[1]  fleet:lock:<name>   the holder's token, TTL = hold
-- KEYS[2]  fleet:fence:<name>  the last fencing token (derived, same slot)
-- ARGV[1]  the caller's random token
-- ARGV[2]  hold in milliseconds
-- returns  {1, fence} when taken: fence rises with every acquisition, and
--          stays above every earlier one even if KEYS[2] was lost, since it
--          is at least the server's clock in microseconds. A retry of a
--          call whose reply was lost finds its own token and gets {1, the
--          same fence}, so the lock is never stranded.
--          {0, pttl} when held by another (pttl: the holder's time left, ms);
--          a WRONGTYPE error, nothing changed, when a key holds another type
local err = wrong_types('string')
if err then return err end
local last = redis.call('GET', KEYS[2])
if last and not tonumber(last) then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not an integer')
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = math.max((tonumber(last) or 0) + 1, now)
  redis.call('SET', KEYS[2], string.format('%d', fence))
  return {1, string.format('%d', fence)}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, last or '0'}
end
return {0, redis.call('PTTL', KEYS[1])}
