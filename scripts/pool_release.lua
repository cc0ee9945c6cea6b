-- pool_release: end a claim, only if the caller still owns it.
-- KEYS[1]  fleet:pool:<name>:claim:<id>  "1", TTL = hold
-- KEYS[2]  fleet:pidx:<name>:own:<id>    the owner's token (derived)
-- KEYS[3]  fleet:pidx:<name>:sig         wake-up counter (derived)
-- ARGV[1]  the caller's token
-- returns  1 when released; 0 when the claim ran out (and perhaps another
--          claimed the item since): then nothing changes
if redis.call('GET', KEYS[2]) == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('INCR', KEYS[3])
  return 1
end
return 0
