-- pool_markbad: remove a claimed item for good, with its claim, if the
-- caller owns the claim.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[7]  fleet:pool:<name>:claim:<id>
-- KEYS[8]  fleet:pidx:<name>:own:<id>
-- ARGV[3]  the caller's token
-- ARGV[4]  item id
-- returns  1 when removed (also when the item was already gone); 0 when
--          the claim ran out (nothing changes)
if redis.call('GET', KEYS[8]) ~= ARGV[3] or redis.call('EXISTS', KEYS[7]) == 0 then
  return 0
end
local err = wrong_type()
if err then return err end
local raw = redis.call('HGET', P.hash, ARGV[4])
if raw then
  drop(ARGV[4], (decode(raw)))
end
redis.call('DEL', KEYS[7], KEYS[8])
return 1
