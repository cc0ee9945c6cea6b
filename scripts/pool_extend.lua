-- pool_extend: push a claim's lease to hold from now, if the caller owns it.
-- KEYS[1]  fleet:pool:<name>:claim:<id>  "1", TTL = hold
-- KEYS[2]  fleet:pidx:<name>:own:<id>    the owner's token (derived)
-- ARGV[1]  the caller's token
-- ARGV[2]  the new hold in milliseconds
-- returns  1 when extended; 0 when the claim ran out (nothing changes)
if redis.call('GET', KEYS[2]) == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
