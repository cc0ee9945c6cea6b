-- sem_acquire: take one of limit permits of a semaphore, for a lease.
-- KEYS[1]  fleet:sem:<name>      zset: token -> server ms when its lease
--          ends; TTL = its last member's deadline
-- KEYS[2]  fleet:semtomb:<name>  zset: abandoned tokens (same slot)
-- ARGV[1]  the caller's random token
-- ARGV[2]  hold in milliseconds
-- ARGV[3]  limit: how many permits may be held at once
-- ARGV[4]  optional: take up to this many permits (>= 1) in one call, the
--          i-th with token ARGV[1]..i, with no tombstone check: a sharded
--          queue's reserve (QueueOptions.GlobalConcurrency, whose permits
--          live in fleet:queue:<name>:permits); then returns {taken, held}
--          when it took some, else as below
-- returns  {1, held} when taken (held: the permits held now, this one
--          included); a retry of a call whose reply was lost finds its own
--          token and gets {1, held} again, the lease unchanged.
--          {0, ms} when all limit permits are held (ms: until the first
--          lease ends, server clock);
--          {0, -2} when the caller's token was abandoned (nothing held);
--          a WRONGTYPE error, nothing changed, when a key holds another
--          type.
-- Leases that ended are dropped first (which wakes the waiters that track
-- the key).
local us = now_us()
local now = math.floor(us / 1000)
local dead = redis.call('ZSCORE', KEYS[2], ARGV[1])
if dead and tonumber(dead) > now then
  return {0, -2}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[4] then
  local held = redis.call('ZCARD', KEYS[1])
  local room = math.min(tonumber(ARGV[3]) - held, tonumber(ARGV[4]))
  if room <= 0 then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, first[2] and tonumber(first[2]) - now or -1}
  end
  local deadline = math.ceil(us / 1000) + tonumber(ARGV[2])
  local add = {}
  for i = 1, room do
    add[2 * i - 1], add[2 * i] = deadline, ARGV[1] .. i
  end
  redis.call('ZADD', KEYS[1], unpack(add))
  expire_with_last(KEYS[1])
  return {room, held + room}
end
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local held = redis.call('ZCARD', KEYS[1])
if mine then
  return {1, held}
end
if held >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
-- The lease ends hold after now, rounded up to the ms: never sooner.
redis.call('ZADD', KEYS[1], math.ceil(us / 1000) + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return {1, held + 1}
