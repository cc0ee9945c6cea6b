-- pool_clean: one bounded step of removing stale entries from one index
-- set: ids whose item is gone, and, for the free set, claimed ones, and,
-- for a tag index, ids not free or whose tag no longer has the set's
-- value (or whose field is no longer indexed).
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua
-- KEYS[12] the set: fleet:pidx:<name>:all, :free, :bad, or
--          fleet:pidx:<name>:t:<field>:<canon>
-- ARGV[4]  SSCAN cursor
-- ARGV[5]  SSCAN COUNT
-- ARGV[6]  field ("" but for a tag index)
-- ARGV[7]  canon of the set's value
-- returns  {cursor, removed}; cursor "0" ends the pass
local set, field = KEYS[12], ARGV[6]
local indexed = false
for _, f in ipairs(FIELDS) do
  if f == field then indexed = true end
end
local now = now_ms()
local r = redis.call('SSCAN', set, ARGV[4], 'COUNT', ARGV[5])
local removed = 0
for _, id in ipairs(r[2]) do
  local raw = redis.call('HGET', P.hash, id)
  local t, x
  if raw then t, x = decode(raw) end
  if field ~= '' then
    if not indexed or not t or canon(t[field]) ~= ARGV[7] or redis.call('SISMEMBER', P.free, id) == 0 then
      redis.call('SREM', set, id)
      removed = removed + 1
    end
  elseif set == P.bad then
    if not raw then
      redis.call('SREM', set, id)
      removed = removed + 1
    elseif t then
      index(id, t, x, now)
      removed = removed + 1
    end
  elseif not raw then
    forget(id)
    removed = removed + 1
  elseif not t then
    forget(id)
    redis.call('SADD', P.bad, id)
    removed = removed + 1
  elseif set == P.free and (redis.call('SISMEMBER', P.all, id) == 0 or redis.call('EXISTS', P.claim .. id) == 1) then
    index(id, t, x, now)
    removed = removed + 1
  end
end
if field ~= '' and redis.call('EXISTS', set) == 0 then
  redis.call('SREM', P.reg, set)
end
return {r[1], removed}
