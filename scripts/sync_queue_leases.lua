-- sync_queue_leases: one bounded step of Sync's check of a queue's lease
-- hash against its reservations.
--  - 'stale': HSCAN the lease hash from a cursor; an entry whose id is not
--    in :processing is stale (its reservation ended) and is removed, and so
--    is a reserve call's record none of whose ids is. The
--    check and the removal are one atomic step per entry, so a reservation
--    made or ended meanwhile is never mistaken.
--  - 'missing': ZSCAN :processing from a cursor and count the reservations
--    without a lease entry. They are not repaired: no worker holds a token
--    for them, so they end through the sweeper when their deadline passes,
--    as another client's reservation does.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  'stale' or 'missing'
-- ARGV[2]  the scan cursor ('0' to start)
-- ARGV[3]  the scan's COUNT
-- returns  {next cursor ('0' when done), entries removed or reservations
--          counted in this step}
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local n = 0
if ARGV[1] == 'stale' then
  local r = redis.call('HSCAN', LEASE, ARGV[2], 'COUNT', ARGV[3])
  local kv = r[2]
  for i = 1, #kv, 2 do
    local live
    if string.byte(kv[i], 1) == 255 then
      -- A reserve call's record (lib_queue.lua): stale once none of the
      -- ids it took is in flight any more.
      local ok, ids = pcall(cjson.decode, kv[i + 1])
      live = false
      if ok and type(ids) == 'table' then
        for _, id in ipairs(ids) do
          if type(id) == 'string' and redis.call('ZSCORE', PROCESSING, id) then live = true break end
        end
      end
    else
      live = redis.call('ZSCORE', PROCESSING, kv[i])
    end
    if not live then
      redis.call('HDEL', LEASE, kv[i])
      n = n + 1
    end
  end
  return {r[1], n}
end
local r = redis.call('ZSCAN', PROCESSING, ARGV[2], 'COUNT', ARGV[3])
local ms = r[2]
for i = 1, #ms, 2 do
  if redis.call('HEXISTS', LEASE, ms[i]) == 0 then
    n = n + 1
  end
end
return {r[1], n}
