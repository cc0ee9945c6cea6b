-- sem_release: give a permit back, only if the caller's lease still holds.
-- KEYS[1]  fleet:sem:<name>  zset: token -> server ms when its lease ends
-- ARGV[1]  the caller's token
-- returns  1 when released; 0 when the lease had ended (its token is
--          dropped if still there) or was never there; a WRONGTYPE error,
--          nothing changed, when the key holds another type (ZSCORE
--          refuses it). The key goes when its last member does.
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not d then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
local now = now_ms()
if tonumber(d) <= now then
  return 0
end
return 1
