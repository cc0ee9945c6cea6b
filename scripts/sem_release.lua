-- sem_release: give a permit back, only if the caller's lease still holds.
-- KEYS[1]  fleet:sem:<name>  zset: token -> server ms when its lease ends
-- ARGV[1]  the caller's token
-- ARGV[2..] optional: more tokens to give back (a sharded queue's
--          GlobalConcurrency permits, fleet:queue:<name>:permits)
-- returns  how many of the tokens were released while their lease held:
--          with one token, 1 when released; 0 when the lease had ended (its token is
--          dropped if still there) or was never there; a WRONGTYPE error,
--          nothing changed, when the key holds another type (ZSCORE
--          refuses it). The key goes when its last member does.
local now = now_ms()
local n = 0
for i = 1, #ARGV do
  local d = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if d then
    redis.call('ZREM', KEYS[1], ARGV[i])
    if tonumber(d) > now then
      n = n + 1
    end
  end
end
return n
