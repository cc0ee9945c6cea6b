-- pool_index: one bounded step of (re)indexing the pool hash: index the
-- entries the indexes lack (items written by another client), drop the
-- expired ones, count the ones that are not valid items.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- ARGV[4]  HSCAN cursor; "" to resume from the cursor kept in KEYS[6]
--          (the incremental reindex of puts and claims)
-- ARGV[5]  HSCAN COUNT
-- ARGV[6]  "1" to re-index entries already indexed too (rebuild): their
--          tag sets and free/held place are made again from the entry
-- returns  {cursor, indexed, bad, pruned}; cursor "0" ends a pass;
--          indexed counts items new to the indexes, bad the entries that
--          are not items
local err = wrong_type()
if err then return err end
local cursor, kept = ARGV[4], ARGV[4] == ''
if kept then cursor = redis.call('GET', P.scan) or '0' end
local force = ARGV[6] == '1'
local r = redis.call('HSCAN', P.hash, cursor, 'COUNT', ARGV[5])
local now = now_ms()
local added, bad, pruned, freed = 0, 0, 0, 0
for i = 1, #r[2], 2 do
  local id, raw = r[2][i], r[2][i + 1]
  local known = redis.call('SISMEMBER', P.all, id) == 1
  if force or not known then
    local t, x = decode(raw)
    if t == nil then
      bad = bad + 1
      if known then forget(id) end
      if redis.call('SADD', P.bad, id) == 1 and not force then mark_foreign() end
    elseif x and x * 1000 <= now then
      drop(id, t)
      pruned = pruned + 1
    else
      if not known then added = added + 1 end
      if index(id, t, x, now) then freed = freed + 1 end
    end
  end
end
if kept then
  if r[1] == '0' then redis.call('DEL', P.scan) else redis.call('SET', P.scan, r[1]) end
end
if added > 0 and not force then mark_foreign() end
if freed > 0 then redis.call('INCR', P.sig) end
return {r[1], added, bad, pruned}
