-- pool_extend: push a claim's lease to hold from now, if the caller owns it.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua
-- KEYS[12] fleet:pool:<name>:claim:<id>  "1", TTL = hold
-- KEYS[13] fleet:pidx:<name>:own:<id>    the owner's token (derived)
-- ARGV[4]  the caller's token
-- ARGV[5]  the new hold in milliseconds
-- ARGV[6]  item id
-- returns  1 when extended; 0 when the claim ran out (nothing changes)
if redis.call('GET', KEYS[13]) == ARGV[4] and redis.call('EXISTS', KEYS[12]) == 1 then
  redis.call('PEXPIRE', KEYS[12], ARGV[5])
  redis.call('PEXPIRE', KEYS[13], ARGV[5])
  redis.call('ZADD', P.held, 'XX', now_ms() + tonumber(ARGV[5]), ARGV[6])
  return 1
end
return 0
