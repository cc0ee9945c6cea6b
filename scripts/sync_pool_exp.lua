-- sync_pool_exp: one bounded step of removing stale entries from a pool's
-- expiry index: ids that the pool hash no longer holds, or whose entry has
-- no expiry (or is not a valid item). Valid items with an expiry are
-- (re)indexed by pool_index; this removes what it cannot see.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua
-- ARGV[4]  ZSCAN cursor
-- ARGV[5]  ZSCAN COUNT
-- returns  {cursor, removed}; cursor "0" ends the pass
local err = wrong_type()
if err then return err end
local r = redis.call('ZSCAN', P.exp, ARGV[4], 'COUNT', ARGV[5])
local removed = 0
for i = 1, #r[2], 2 do
  local id = r[2][i]
  local raw = redis.call('HGET', P.hash, id)
  local stale = not raw
  if raw then
    local t, x = decode(raw)
    stale = t == nil or not x
  end
  if stale then
    redis.call('ZREM', P.exp, id)
    removed = removed + 1
  end
end
return {r[1], removed}
