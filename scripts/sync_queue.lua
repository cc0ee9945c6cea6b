-- sync_queue: rebuild a queue's derived hashes from its documented keys, in
-- one atomic step (so no concurrent reserve, ack or submit can fall between
-- what it reads and what it writes). Its cost is linear in the queue's size:
-- every body is read once (a body without the text "dedup" is not decoded).
--  - :processing:lease: an entry whose id is not in :processing is stale
--    (its reservation ended) and is removed. A reservation without a lease
--    entry is counted and left alone: no worker holds a token for it, so it
--    ends through the sweeper when its deadline passes, as another client's
--    reservation does.
--  - :dedup: made equal to the dedup keys of the live tasks (pending,
--    scheduled, in flight): missing entries are added, entries whose task is
--    gone are removed, an entry naming another id than the live task that
--    carries its key is pointed at that task.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> token (derived)
-- KEYS[5]  fleet:queue:<name>:scheduled         zset: body -> ready_at
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- returns  {leases_removed, leases_missing, dedup_added, dedup_removed, dedup_fixed}
local err = wrong_types({'list', 'zset', 'hash', 'hash', 'zset', 'hash'})
if err then return err end
local out = {0, 0, 0, 0, 0}
local leases = redis.call('HKEYS', KEYS[4])
for _, id in ipairs(leases) do
  if not redis.call('ZSCORE', KEYS[2], id) then
    redis.call('HDEL', KEYS[4], id)
    out[1] = out[1] + 1
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('HEXISTS', KEYS[4], id) == 0 then
    out[2] = out[2] + 1
  end
end
-- live: dedup key -> {first = the first live id seen, ids = set of the ids
-- of live tasks that carry it} (two tables: an id may be any string)
local live = {}
local function note(body)
  if not string.find(body, '"dedup"', 1, true) then return end
  local ok, v = pcall(cjson.decode, body)
  if not ok or type(v) ~= 'table' or type(v.dedup) ~= 'string' or v.dedup == '' or type(v.id) ~= 'string' or v.id == '' then
    return
  end
  local e = live[v.dedup]
  if not e then
    e = {first = v.id, ids = {}}
    live[v.dedup] = e
  end
  e.ids[v.id] = true
end
for _, b in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do note(b) end
for _, b in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do note(b) end
for _, b in ipairs(redis.call('HVALS', KEYS[3])) do note(b) end
local have = redis.call('HGETALL', KEYS[6])
local seen = {}
for i = 1, #have, 2 do
  local key, id = have[i], have[i + 1]
  local e = live[key]
  seen[key] = true
  if not e then
    redis.call('HDEL', KEYS[6], key)
    out[4] = out[4] + 1
  elseif not e.ids[id] then
    redis.call('HSET', KEYS[6], key, e.first)
    out[5] = out[5] + 1
  end
end
for key, e in pairs(live) do
  if not seen[key] then
    redis.call('HSET', KEYS[6], key, e.first)
    out[3] = out[3] + 1
  end
end
return out
