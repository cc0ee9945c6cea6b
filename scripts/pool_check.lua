-- pool_check: one bounded step of checking the pool hash against the
-- indexes, for a claim that found none while another client may have
-- written the pool, and for the sweeper: entries the indexes lack are
-- indexed; an indexed item whose claim key says otherwise than its place
-- (claimed by another client, or released by one) is moved.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- ARGV[4]  HSCAN cursor
-- ARGV[5]  HSCAN COUNT
-- returns  {cursor, freed, fixed}; cursor "0" ends a pass; freed counts
--          items that became claim candidates, fixed every entry changed
local err = wrong_type()
if err then return err end
local r = redis.call('HSCAN', P.hash, ARGV[4], 'COUNT', ARGV[5])
local now = now_ms()
local freed, fixed = 0, 0
for i = 1, #r[2], 2 do
  local id, raw = r[2][i], r[2][i + 1]
  local redo, other = true, true
  if redis.call('SISMEMBER', P.all, id) == 1 then
    local claimed = redis.call('EXISTS', P.claim .. id) == 1
    local score = redis.call('ZSCORE', P.held, id)
    if claimed then
      redo = not score
    elseif score then
      -- a held item whose deadline just passed is not another client's doing
      other = tonumber(score) > now + 1000
    else
      redo = redis.call('SISMEMBER', P.free, id) == 0
      other = false -- neither free nor held: an index key was lost
    end
  end
  if redo then
    local t, x = decode(raw)
    if t == nil then
      if redis.call('SISMEMBER', P.bad, id) == 0 then
        forget(id)
        redis.call('SADD', P.bad, id)
        fixed = fixed + 1
        mark_foreign()
      end
    elseif x and x * 1000 <= now then
      drop(id, t)
    else
      if index(id, t, x, now) then freed = freed + 1 end
      fixed = fixed + 1
      if other then mark_foreign() end
    end
  end
end
if freed > 0 then redis.call('INCR', P.sig) end
return {r[1], freed, fixed}
