-- lib_pool: helpers of the pool scripts that touch the pool hash
-- (pool_put, pool_claim, pool_delete, pool_markbad, pool_release,
-- pool_abandon, pool_index, pool_check, pool_clean, pool_prune,
-- sync_pool_exp; scripts.go links in the blocks a script calls, and the
-- block of P, which every helper uses). Not a script by itself.
--
-- Those scripts share KEYS[1..11]:
-- KEYS[1]  fleet:pool:<name>           hash: item id -> {"p","t","x"}
-- KEYS[2]  fleet:pidx:<name>:all       set of indexed item ids, free or held (derived)
-- KEYS[3]  fleet:pidx:<name>:exp       zset: id -> expires_at ms (derived)
-- KEYS[4]  fleet:pidx:<name>:tags      set of tag index keys in use (derived)
-- KEYS[5]  fleet:pidx:<name>:sig       wake-up counter (derived)
-- KEYS[6]  fleet:pidx:<name>:scan      reindex HSCAN cursor (derived)
-- KEYS[7]  fleet:pidx:<name>:free      set: indexed ids with no claim (derived)
-- KEYS[8]  fleet:pidx:<name>:held      zset: claimed id -> claim deadline ms (derived)
-- KEYS[9]  fleet:pidx:<name>:bad       set: hash entries that are not items (derived)
-- KEYS[10] fleet:pidx:<name>:foreign   "1" with a TTL: another client wrote lately
-- KEYS[11] fleet:pidx:<name>:fields    JSON array of the indexed tag fields
-- ARGV[1]  fleet:pidx:<name>:          prefix of tag index, owner and token keys
-- ARGV[2]  fleet:pool:<name>:claim:    prefix of claim keys
-- ARGV[3]  JSON array of the indexed tag fields; "" to read KEYS[11]
--
-- An indexed item is in exactly one of free (with its tag sets
-- <ARGV[1]>t:<field>:<canon>, which hold free items only) and held. A claim
-- moves it to held with its deadline; release, mark-bad and the deadline
-- passing (checked a bounded number at a time by each claim) end that.
--
-- Keys built in the script from ARGV[1] and ARGV[2] (tag index sets, owners
-- <ARGV[1]>own:<id>, claim tokens <ARGV[1]>tok:<token>, claims
-- <ARGV[2]><id>) belong to items the script only finds while it runs, so
-- they cannot be declared in KEYS. That stays correct on a Redis Cluster
-- only because, in the tagged layout, both prefixes carry the pool's hash
-- tag {<name>}: every such key is in KEYS[1]'s slot. The test suite runs
-- every pool script on a three-master cluster.

local P = {
  hash = KEYS[1], all = KEYS[2], exp = KEYS[3], reg = KEYS[4], sig = KEYS[5], scan = KEYS[6],
  free = KEYS[7], held = KEYS[8], bad = KEYS[9], foreign = KEYS[10], fields = KEYS[11],
  tp = ARGV[1] .. 't:', own = ARGV[1] .. 'own:', tok = ARGV[1] .. 'tok:', claim = ARGV[2],
}
local FOREIGN_MS = 86400000 -- how long one sign of another writer keeps full checks on
local RECHECK_MS = 60000    -- when to look again at a claim key that has no TTL

local FIELDS
do
  local s = ARGV[3]
  if s == '' then s = redis.call('GET', P.fields) or '[]' end
  local ok, f = pcall(cjson.decode, s)
  if not ok or type(f) ~= 'table' then f = {} end
  FIELDS = f
end

-- an error reply when the pool hash is some other type
local function wrong_type()
  local ty = redis.call('TYPE', P.hash).ok
  if ty ~= 'hash' and ty ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. P.hash .. ' holds a ' .. ty .. ', not a pool hash')
  end
  return nil
end

-- another client changed the pool without fleet's indexes: claims that
-- find none check the whole hash for a while.
local function mark_foreign()
  redis.call('SET', P.foreign, '1', 'PX', FOREIGN_MS)
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

-- tag_keys lists the tag index sets of an item with tags t: one per
-- indexed field (FIELDS) whose value is a string, boolean or number.
local function tag_keys(t)
  local out = {}
  for _, f in ipairs(FIELDS) do
    local c = canon(t[f])
    if c then out[#out + 1] = P.tp .. f .. ':' .. c end
  end
  return out
end

-- set_free makes item id (tags t) a claim candidate.
local function set_free(id, t)
  redis.call('SADD', P.free, id)
  for _, k in ipairs(tag_keys(t)) do
    redis.call('SADD', k, id)
    redis.call('SADD', P.reg, k)
  end
end

-- unset_free takes item id out of the candidates (t nil: its tag sets are
-- cleaned where a claim or a clean step meets it).
local function unset_free(id, t)
  redis.call('SREM', P.free, id)
  if t then
    for _, k in ipairs(tag_keys(t)) do redis.call('SREM', k, id) end
  end
end

-- place puts an indexed valid item where its claim key says: held until
-- the key's deadline while it exists, else free. Returns true when free.
local function place(id, t, now)
  local pttl = redis.call('PTTL', P.claim .. id)
  if pttl == -2 then
    redis.call('ZREM', P.held, id)
    set_free(id, t)
    return true
  end
  if pttl < 0 then pttl = RECHECK_MS end
  unset_free(id, t)
  -- a deadline still ahead stands (Extend moves it itself): only a missing
  -- or passed one is set from the claim key's TTL
  local d = redis.call('ZSCORE', P.held, id)
  if not d or tonumber(d) <= now then
    redis.call('ZADD', P.held, now + pttl, id)
  end
  return false
end

-- index adds a valid item (tags t, expiry x seconds or false) to every
-- index; returns true when it is free.
local function index(id, t, x, now)
  redis.call('SADD', P.all, id)
  redis.call('SREM', P.bad, id)
  if x then
    redis.call('ZADD', P.exp, x * 1000, id)
  else
    redis.call('ZREM', P.exp, id)
  end
  return place(id, t, now)
end

-- forget removes an id from the item indexes (not from tag sets, whose
-- keys need the tags: those entries are cleaned where they are met).
local function forget(id)
  redis.call('SREM', P.all, id)
  redis.call('SREM', P.free, id)
  redis.call('ZREM', P.exp, id)
  redis.call('ZREM', P.held, id)
  redis.call('SREM', P.bad, id)
end

-- drop removes item id from the hash and every index (t may be nil for an
-- entry that does not decode); a tag set it leaves empty leaves the
-- registry too.
local function drop(id, t)
  if t then
    for _, k in ipairs(tag_keys(t)) do
      if redis.call('SREM', k, id) == 1 and redis.call('SCARD', k) == 0 then
        redis.call('SREM', P.reg, k)
      end
    end
  end
  redis.call('HDEL', P.hash, id)
  forget(id)
end

-- settle looks at a held item whose claim deadline passed: free again when
-- its claim key is gone, held longer when the key was extended. Returns 1
-- when it became free.
local function settle(id, now)
  local raw = redis.call('HGET', P.hash, id)
  if not raw then
    forget(id) -- fleet's own deletes leave no held entry behind
    mark_foreign()
    return 0
  end
  local t, x = decode(raw)
  if t == nil then
    forget(id)
    redis.call('SADD', P.bad, id)
    mark_foreign()
    return 0
  end
  if x and x * 1000 <= now then
    drop(id, t)
    return 0
  end
  if place(id, t, now) then return 1 end
  return 0
end

-- drain settles up to n held items whose deadline passed. Returns how many
-- became free, and whether more may be due.
local function drain(now, n)
  local due = redis.call('ZRANGEBYSCORE', P.held, '-inf', now, 'LIMIT', 0, n)
  local freed = 0
  for _, id in ipairs(due) do freed = freed + settle(id, now) end
  return freed, #due == n
end

-- prune drops up to n items whose expiry is past, oldest first, and
-- returns how many it dropped. Bounded work: a put never stalls the server.
local function prune(now, n)
  if n <= 0 then return 0 end
  local c = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P.exp, '-inf', now, 'LIMIT', 0, n)) do
    local raw = redis.call('HGET', P.hash, id)
    if not raw then
      forget(id)
    else
      local t, x = decode(raw)
      if t == nil then
        forget(id) -- not an item: List reports it
        redis.call('SADD', P.bad, id)
        mark_foreign()
      elseif x and x * 1000 <= now then
        drop(id, t)
        c = c + 1
      else
        index(id, t, x, now) -- rewritten by another client: re-index
        mark_foreign()
      end
    end
  end
  return c
end

-- unclaim makes item id free again after its claim was ended (claim and
-- owner keys deleted by the caller), and wakes waiters.
local function unclaim(id, now)
  redis.call('ZREM', P.held, id)
  local raw = redis.call('HGET', P.hash, id)
  if not raw then
    forget(id)
    return
  end
  local t, x = decode(raw)
  if t == nil then
    forget(id)
    redis.call('SADD', P.bad, id)
    return
  end
  if x and x * 1000 <= now then
    drop(id, t)
    return
  end
  redis.call('SADD', P.all, id)
  set_free(id, t)
  redis.call('INCR', P.sig)
end
