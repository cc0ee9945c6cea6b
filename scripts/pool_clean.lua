-- pool_clean: one bounded step of removing stale entries from one index
-- set: ids whose item is gone, and (for a tag index) whose tag no longer
-- has the set's value.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua
-- KEYS[7]  the set: fleet:pidx:<name>:all or fleet:pidx:<name>:t:<field>:<canon>
-- ARGV[3]  SSCAN cursor
-- ARGV[4]  SSCAN COUNT
-- ARGV[5]  field ("" for the all-set)
-- ARGV[6]  canon of the set's value
-- returns  {cursor, removed}; cursor "0" ends the pass
local r = redis.call('SSCAN', KEYS[7], ARGV[3], 'COUNT', ARGV[4])
local removed = 0
for _, id in ipairs(r[2]) do
  local raw = redis.call('HGET', P.hash, id)
  local stale = not raw
  if raw then
    local t = decode(raw)
    stale = t == nil or (ARGV[5] ~= '' and canon(t[ARGV[5]]) ~= ARGV[6])
  end
  if stale then
    redis.call('SREM', KEYS[7], id)
    if ARGV[5] == '' then redis.call('ZREM', P.exp, id) end
    removed = removed + 1
  end
end
if ARGV[5] ~= '' and redis.call('EXISTS', KEYS[7]) == 0 then
  redis.call('SREM', P.reg, KEYS[7])
end
return {r[1], removed}
