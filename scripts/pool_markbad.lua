-- pool_markbad: remove a claimed item for good, with its claim, if the
-- caller owns the claim.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[12] fleet:pool:<name>:claim:<id>
-- KEYS[13] fleet:pidx:<name>:own:<id>
-- KEYS[14] fleet:pidx:<name>:tok:<token>
-- ARGV[4]  the caller's token
-- ARGV[5]  item id
-- returns  1 when removed (also when the item was already gone); 0 when
--          the claim ran out (nothing changes)
if redis.call('GET', KEYS[13]) ~= ARGV[4] or redis.call('EXISTS', KEYS[12]) == 0 then
  return 0
end
local err = wrong_type()
if err then return err end
local raw = redis.call('HGET', P.hash, ARGV[5])
if raw then
  drop(ARGV[5], (decode(raw)))
else
  forget(ARGV[5])
end
redis.call('DEL', KEYS[12], KEYS[13], KEYS[14])
return 1
