-- pool_lib: helpers that fleet prepends to every pool script that touches
-- the pool hash (pool_put, pool_claim, pool_delete, pool_markbad,
-- pool_index, pool_clean). Not a script by itself.
--
-- Those scripts share KEYS[1..6]:
-- KEYS[1]  fleet:pool:<name>           hash: item id -> {"p","t","x"}
-- KEYS[2]  fleet:pidx:<name>:all       set of indexed item ids (derived)
-- KEYS[3]  fleet:pidx:<name>:exp       zset: id -> expires_at ms (derived)
-- KEYS[4]  fleet:pidx:<name>:tags      set of tag index keys (derived)
-- KEYS[5]  fleet:pidx:<name>:sig       wake-up counter (derived)
-- KEYS[6]  fleet:pidx:<name>:scan      reindex HSCAN cursor (derived)
-- ARGV[1]  fleet:pidx:<name>:          prefix of tag index and owner keys
-- ARGV[2]  fleet:pool:<name>:claim:    prefix of claim keys
--
-- Keys built in the script from ARGV[1] and ARGV[2] (tag index sets
-- <ARGV[1]>t:<field>:<canon>, owners <ARGV[1]>own:<id>, claims
-- <ARGV[2]><id>) belong to items the script only finds while it runs, so
-- they cannot be declared in KEYS. That stays correct on a Redis Cluster
-- only because, in the tagged layout, both prefixes carry the pool's hash
-- tag {<name>}: every such key is in KEYS[1]'s slot. The test suite runs
-- every pool script on a three-master cluster.

local P = {
  hash = KEYS[1], all = KEYS[2], exp = KEYS[3], reg = KEYS[4], sig = KEYS[5], scan = KEYS[6],
  tp = ARGV[1] .. 't:', own = ARGV[1] .. 'own:', claim = ARGV[2],
}

-- the server's clock in unix milliseconds
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- an error reply when the pool hash is some other type
local function wrong_type()
  local ty = redis.call('TYPE', P.hash).ok
  if ty ~= 'hash' and ty ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. P.hash .. ' holds a ' .. ty .. ', not a pool hash')
  end
  return nil
end

-- canon is a tag value's canonical form, as in the key of its index set
-- (internal/keys PoolTagIndex); nil for values that are not indexed.
local function canon(v)
  local tv = type(v)
  if tv == 'string' then
    if #v > 128 then return 'h' .. redis.sha1hex(v) end
    return 's' .. v
  elseif tv == 'boolean' then
    if v then return 'T' end
    return 'F'
  elseif tv == 'number' then
    if v ~= v or v == math.huge or v == -math.huge then return nil end
    if v == math.floor(v) and math.abs(v) < 1e15 then return 'n' .. string.format('%d', v) end
    return 'n' .. string.format('%.17g', v)
  end
  return nil
end

-- decode returns an item's tags table and expiry (unix seconds, or false
-- for none), or nil when the entry is not a valid item: not JSON, or "p"
-- not a base64 string, "t" not an object, "x" neither a number nor null.
local function decode(raw)
  local ok, it = pcall(cjson.decode, raw)
  if not ok or type(it) ~= 'table' then return nil end
  if type(it.p) ~= 'string' or not string.find(it.p, '^[A-Za-z0-9+/]*=?=?$') then return nil end
  if type(it.t) ~= 'table' then return nil end
  local x = it.x
  if x == cjson.null then return it.t, false end
  if type(x) ~= 'number' then return nil end
  return it.t, x
end

-- tag_keys lists the index sets of an item with tags t: one per top-level
-- field with a string, boolean or number value, whose name is at most 128
-- bytes and holds no ':'.
local function tag_keys(t)
  local out = {}
  for k, v in pairs(t) do
    if type(k) == 'string' and #k <= 128 and not string.find(k, ':', 1, true) then
      local c = canon(v)
      if c then out[#out + 1] = P.tp .. k .. ':' .. c end
    end
  end
  return out
end

-- index adds item id (tags t, expiry x seconds or false) to every index.
local function index(id, t, x)
  redis.call('SADD', P.all, id)
  for _, k in ipairs(tag_keys(t)) do
    redis.call('SADD', k, id)
    redis.call('SADD', P.reg, k)
  end
  if x then
    redis.call('ZADD', P.exp, x * 1000, id)
  else
    redis.call('ZREM', P.exp, id)
  end
end

-- drop removes item id from the hash and every index (t may be nil for an
-- entry that does not decode: its tag sets are then cleaned lazily).
local function drop(id, t)
  if t then
    for _, k in ipairs(tag_keys(t)) do
      if redis.call('SREM', k, id) == 1 and redis.call('SCARD', k) == 0 then
        redis.call('SREM', P.reg, k)
      end
    end
  end
  redis.call('HDEL', P.hash, id)
  redis.call('SREM', P.all, id)
  redis.call('ZREM', P.exp, id)
end

-- prune drops up to n items whose expiry is past, oldest first, and
-- returns how many it dropped. Bounded work: a put never stalls the server.
local function prune(now, n)
  if n <= 0 then return 0 end
  local c = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P.exp, '-inf', now, 'LIMIT', 0, n)) do
    local raw = redis.call('HGET', P.hash, id)
    if not raw then
      redis.call('ZREM', P.exp, id)
      redis.call('SREM', P.all, id)
    else
      local t, x = decode(raw)
      if t == nil then
        redis.call('ZREM', P.exp, id) -- not an item: List reports it
      elseif x and x * 1000 <= now then
        drop(id, t)
        c = c + 1
      else
        index(id, t, x) -- rewritten by another client: re-index
      end
    end
  end
  return c
end
