-- pool_release: end a claim, only if the caller still owns it, and make
-- the item free again.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[12] fleet:pool:<name>:claim:<id>  "1", TTL = hold
-- KEYS[13] fleet:pidx:<name>:own:<id>    the owner's token (derived)
-- KEYS[14] fleet:pidx:<name>:tok:<token> the item the token took (derived)
-- ARGV[4]  the caller's token
-- ARGV[5]  item id
-- returns  1 when released; 0 when the claim ran out (and perhaps another
--          claimed the item since): then nothing changes
local err = wrong_type()
if err then return err end
if redis.call('GET', KEYS[13]) ~= ARGV[4] or redis.call('EXISTS', KEYS[12]) == 0 then
  return 0
end
redis.call('DEL', KEYS[12], KEYS[13], KEYS[14])
unclaim(ARGV[5], now_ms())
return 1
