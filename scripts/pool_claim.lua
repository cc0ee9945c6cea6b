-- pool_claim: claim one free, unexpired item matching every filter.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua
-- KEYS[12..]  fleet:pidx:<name>:t:<field>:<canon>: one per filter on an
--             indexed field (free items with that value)
-- ARGV[4]  the claimer's random token
-- ARGV[5]  hold in milliseconds
-- ARGV[6]  lifetime of the token key <ARGV[1]>tok:<token> in milliseconds
-- ARGV[7]  SSCAN cursor; "" to start a pass (a random sample first)
-- ARGV[8]  the candidate set: 0 to choose (the smallest filter set, or the
--          free set without indexed filters), else the KEYS index that an
--          earlier call of this pass returned
-- ARGV[9]  most candidates to examine in this call
-- ARGV[10] how many filters are on indexed fields (they come first below)
-- ARGV[11..]  field, canon: one pair per filter, the indexed ones first
--             and in KEYS[12..]'s order
-- returns  {1, id, item JSON} when claimed: the claim key <ARGV[2]><id> =
--          "1" and the owner key <ARGV[1]>own:<id> = token, both PX hold;
--          <ARGV[1]>tok:<token> = id; the item moves from free to held;
--          {2} when <ARGV[1]>tok:<token> already exists: the claimer gave
--          up (pool_abandon left it), so nothing is taken;
--          {0, cursor, set, hlen, known, foreign, freed, more} when this
--          call found none: cursor "0" means a whole pass over the
--          candidate set (KEYS index set, 0 for the free set) found none;
--          hlen and known are the hash's length and how many entries the
--          indexes know; foreign is 1 while KEYS[10] exists; freed counts
--          claims found ended (their items free again); more is 1 when
--          more ended claims may wait to be found.
-- Each call first settles up to 32 claims whose deadline passed (held ->
-- free when the claim key is gone). Each candidate is checked against the
-- other sets, the hash, its expiry, every filter and its claim key, so a
-- stale entry is never handed out: it is moved where it belongs.
local err = wrong_type()
if err then return err end
local now = now_ms()
local token, hold = ARGV[4], tonumber(ARGV[5])
local freed, more = drain(now, 32)
if freed > 0 then redis.call('INCR', P.sig) end
local nidx = tonumber(ARGV[10])
local si = tonumber(ARGV[8])
local src = P.free

local function none(cursor)
  return {0, cursor, si, redis.call('HLEN', P.hash),
    redis.call('SCARD', P.all) + redis.call('SCARD', P.bad),
    redis.call('EXISTS', P.foreign), freed, more and 1 or 0}
end

if nidx > 0 then
  if si == 0 then
    local best
    for i = 12, 11 + nidx do
      local n = redis.call('SCARD', KEYS[i])
      if n == 0 then return none('0') end
      if not best or n < best then si, best = i, n end
    end
  end
  src = KEYS[si]
end

-- try returns the item's JSON when it claimed id, nil when id is no
-- match, false when the token is a tombstone.
local function try(id)
  for i = 12, 11 + nidx do
    if i ~= si and redis.call('SISMEMBER', KEYS[i], id) == 0 then return nil end
  end
  local raw = redis.call('HGET', P.hash, id)
  if not raw then
    redis.call('SREM', src, id)
    forget(id)
    mark_foreign()
    return nil
  end
  local t, x = decode(raw)
  if t == nil then
    redis.call('SREM', src, id)
    forget(id)
    redis.call('SADD', P.bad, id)
    mark_foreign()
    return nil
  end
  if x and x * 1000 <= now then
    redis.call('SREM', src, id)
    drop(id, t)
    return nil
  end
  for j = 1, (#ARGV - 10) / 2 do
    if canon(t[ARGV[9 + 2 * j]]) ~= ARGV[10 + 2 * j] then
      if j <= nidx then
        -- in a set its tags no longer justify (rewritten by another client)
        redis.call('SREM', KEYS[11 + j], id)
        place(id, t, now)
        mark_foreign()
      end
      return nil
    end
  end
  if redis.call('EXISTS', P.claim .. id) == 1 then
    -- claimed by a client that keeps no index: held until its key's deadline
    if redis.call('EXISTS', P.own .. id) == 0 then mark_foreign() end
    place(id, t, now)
    return nil
  end
  if not redis.call('SET', P.tok .. token, id, 'NX', 'PX', ARGV[6]) then return false end
  redis.call('SET', P.claim .. id, '1', 'PX', hold)
  redis.call('SET', P.own .. id, token, 'PX', hold)
  unset_free(id, t)
  redis.call('ZADD', P.held, now + hold, id)
  return raw
end

local budget = tonumber(ARGV[9])
local cursor = ARGV[7]
if cursor == '' then
  for _, id in ipairs(redis.call('SRANDMEMBER', src, 16)) do
    local raw = try(id)
    if raw == false then return {2} end
    if raw then return {1, id, raw} end
  end
  budget = budget - 16
  cursor = '0'
end
repeat
  local r = redis.call('SSCAN', src, cursor, 'COUNT', 64)
  cursor = r[1]
  for _, id in ipairs(r[2]) do
    local raw = try(id)
    if raw == false then return {2} end
    if raw then return {1, id, raw} end
  end
  budget = budget - #r[2]
until cursor == '0' or budget <= 0
return none(cursor)
