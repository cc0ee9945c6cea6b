-- sem_extend: push a held permit's lease to hold from now.
-- KEYS[1]  fleet:sem:<name>  zset: token -> server ms when its lease ends
-- ARGV[1]  the caller's token
-- ARGV[2]  the new hold in milliseconds
-- returns  1 when extended; 0 when the lease had ended (its token is
--          dropped if still there) or was never there; a WRONGTYPE error,
--          nothing changed, when the key holds another type. The key's TTL
--          follows its last member.
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not d then
  return 0
end
local us = now_us()
local now = math.floor(us / 1000)
if tonumber(d) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
-- The lease ends hold after now, rounded up to the ms: never sooner.
redis.call('ZADD', KEYS[1], math.ceil(us / 1000) + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return 1
