-- pool_index: one bounded step of (re)indexing the pool hash: index the
-- entries the indexes lack (items written by another client), drop the
-- expired ones, count the ones that are not valid items.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua (tag index keys built in-script)
-- ARGV[3]  HSCAN cursor; "" to resume from the cursor kept in KEYS[6]
--          (the incremental reindex of puts and claims)
-- ARGV[4]  HSCAN COUNT
-- ARGV[5]  "1" to re-index entries already in the all-set too (rebuild)
-- returns  {cursor, indexed, bad, pruned}; cursor "0" ends a pass
local err = wrong_type()
if err then return err end
local cursor, kept = ARGV[3], ARGV[3] == ''
if kept then cursor = redis.call('GET', P.scan) or '0' end
local r = redis.call('HSCAN', P.hash, cursor, 'COUNT', ARGV[4])
local now = now_ms()
local added, bad, pruned = 0, 0, 0
for i = 1, #r[2], 2 do
  local id, raw = r[2][i], r[2][i + 1]
  local t, x = decode(raw)
  if t == nil then
    bad = bad + 1
  elseif x and x * 1000 <= now then
    drop(id, t)
    pruned = pruned + 1
  elseif ARGV[5] == '1' or redis.call('SISMEMBER', P.all, id) == 0 then
    if redis.call('SISMEMBER', P.all, id) == 0 then added = added + 1 end
    index(id, t, x)
  end
end
if kept then
  if r[1] == '0' then redis.call('DEL', P.scan) else redis.call('SET', P.scan, r[1]) end
end
if added > 0 then redis.call('INCR', P.sig) end
return {r[1], added, bad, pruned}
