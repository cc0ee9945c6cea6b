-- lock_acquire: take a lock if it is free and hand out a fencing token.
-- KEYS[1]  fleet:lock:<name>      the holder's token, TTL = hold
-- KEYS[2]  fleet:fence:<name>     the last fencing token (derived, same slot)
-- KEYS[3]  fleet:locktomb:<name>  abandoned tokens (derived, same slot)
-- ARGV[1]  the caller's random token
-- ARGV[2]  hold in milliseconds
-- ARGV[3]  the fence key's lifetime in milliseconds, max(hold, 24 h)
-- returns  {1, fence} when taken. The fence is the last one + 2 (INCRBY
--          keeps the key's TTL); when the key is missing (expired, deleted)
--          or holds a value below 3e15 (an older fleet's), it is re-seeded
--          at 2 x the server's clock in µs, + 1, with a fresh TTL: above
--          every fence handed out since the last seed, which rose by 2 per
--          acquisition, as long as acquisitions come less than once per µs.
--          An odd fence means "tombstones may be pending" (lock_abandon
--          sets it): only then does the script read KEYS[3], and it gives
--          the lock up again when its own token is there. A retry of a call
--          whose reply was lost finds its own token and gets {1, the
--          current fence}, so the lock is never stranded.
--          {0, pttl} when held by another (pttl: the holder's time left, ms);
--          {0, -2} when the caller's token was abandoned (nothing held);
--          a WRONGTYPE error, nothing changed, when the lock or the fence
--          key holds another type (or the fence is not an integer).
-- Cost when free: EVALSHA + SET + INCRBY. No TYPE checks: SET ... GET
-- refuses a wrong-typed lock key before writing, and a failed INCRBY on the
-- fence undoes the SET.
local cur = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if cur then
  if cur == ARGV[1] then
    return {1, redis.call('GET', KEYS[2]) or '0'}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local f = redis.pcall('INCRBY', KEYS[2], 2)
if type(f) == 'table' then
  redis.call('DEL', KEYS[1])
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not an integer fence: ' .. tostring(f.err))
end
local now
if f < 3000000000000000 then
  f = fence_seed(f)
  redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ARGV[3])
end
if f % 2 == 1 then
  now = now_ms()
  local dead = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
  if type(dead) == 'table' then
    redis.call('DEL', KEYS[1])
    return redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ': ' .. tostring(dead.err))
  end
  if dead and tonumber(dead) > now then
    redis.call('DEL', KEYS[1])
    return {0, -2}
  end
  if redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') == 0 then
    f = redis.call('INCRBY', KEYS[2], 1)
  end
end
return {1, f} -- a number: an integer reply (exact: fences stay below 2^53)
