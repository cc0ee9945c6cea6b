-- pool_abandon: undo a claim whose caller gave up while its script was in
-- flight (ctx ended, connection broke), whether that script ran or not.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[12] fleet:pidx:<name>:tok:<token>: the item the token took, or the
--          tombstone "~"
-- ARGV[4]  the token
-- ARGV[5]  lifetime of the tombstone in milliseconds (the hold plus a
--          margin: a claim script arriving later takes nothing)
-- returns  0 when the claim had not run: the tombstone now stops it;
--          1 when it had run: the item is free again if the token still
--          held it (claim, owner and token keys gone), and the tombstone
--          stays
local err = wrong_type()
if err then return err end
local v = redis.call('GET', KEYS[12])
redis.call('SET', KEYS[12], '~', 'PX', ARGV[5])
if not v then return 0 end
if v ~= '~' then
  local ck, ok = P.claim .. v, P.own .. v
  if redis.call('GET', ok) == ARGV[4] and redis.call('EXISTS', ck) == 1 then
    redis.call('DEL', ck, ok)
    unclaim(v, now_ms())
  end
end
return 1
