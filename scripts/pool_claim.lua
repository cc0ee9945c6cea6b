-- pool_claim: claim one free, unexpired item matching every filter.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua
-- KEYS[7..]  fleet:pidx:<name>:t:<field>:<canon>, one per filter
-- ARGV[3]  the claimer's random token
-- ARGV[4]  hold in milliseconds
-- ARGV[5]  SSCAN cursor; "" on the first call (a random sample first)
-- ARGV[6]  most candidates to examine in this call
-- ARGV[7..]  field, canon: one pair per filter, in KEYS[7..]'s order
-- returns  {1, id, item JSON} when claimed: the claim key
--          <ARGV[2]><id> = "1" and the owner key <ARGV[1]>own:<id> = token,
--          both with PX hold;
--          {0, cursor, hlen, indexed} when this call found none: cursor
--          "0" means a whole pass found none; else call again with it.
-- Candidates come from the smallest index set (the all-set without
-- filters); each is checked against the other sets, its claim key, its
-- expiry and its decoded tags, so a stale index entry is never handed out
-- (it is removed from the sets it wrongly sits in). Claim and owner keys
-- are found in-script: see pool_lib.lua on why that is cluster-safe.
local err = wrong_type()
if err then return err end
local now = now_ms()
local src = P.all
if #KEYS > 6 then
  local best
  for i = 7, #KEYS do
    local n = redis.call('SCARD', KEYS[i])
    if n == 0 then
      return {0, '0', redis.call('HLEN', P.hash), redis.call('SCARD', P.all)}
    end
    if not best or n < best then src, best = KEYS[i], n end
  end
end

local function try(id)
  for i = 7, #KEYS do
    if KEYS[i] ~= src and redis.call('SISMEMBER', KEYS[i], id) == 0 then return nil end
  end
  if redis.call('EXISTS', P.claim .. id) == 1 then return nil end
  local raw = redis.call('HGET', P.hash, id)
  if not raw then
    redis.call('SREM', src, id)
    redis.call('SREM', P.all, id)
    redis.call('ZREM', P.exp, id)
    return nil
  end
  local t, x = decode(raw)
  if t == nil then return nil end
  if x and x * 1000 <= now then
    drop(id, t)
    return nil
  end
  for i = 7, #KEYS do
    if canon(t[ARGV[2 * i - 7]]) ~= ARGV[2 * i - 6] then
      redis.call('SREM', KEYS[i], id)
      return nil
    end
  end
  redis.call('SET', P.claim .. id, '1', 'PX', ARGV[4])
  redis.call('SET', P.own .. id, ARGV[3], 'PX', ARGV[4])
  return raw
end

local budget = tonumber(ARGV[6])
local cursor = ARGV[5]
if cursor == '' then
  for _, id in ipairs(redis.call('SRANDMEMBER', src, 16)) do
    local raw = try(id)
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
    if raw then return {1, id, raw} end
  end
  budget = budget - #r[2]
until cursor == '0' or budget <= 0
return {0, cursor, redis.call('HLEN', P.hash), redis.call('SCARD', P.all)}
