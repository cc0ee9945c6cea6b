-- flow_sweep: what a sweep of the queue (or shard) finishes of its flows
-- (docs/FLOWS.md): the outbox entries older than a bound (their end was not
-- passed on: the process that ended them died, or is late), the waiting
-- tasks still uncommitted a grace after they were made (their submitter
-- died, or is very late), and a page of the progress values, whose entries
-- for tasks no longer reserved it deletes (a lease that ran out).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  the age in ms past which an outbox entry is driven
-- ARGV[2]  the grace in ms past which an uncommitted task is resolved
-- ARGV[3]  how many of each to return at most
-- ARGV[4]  the HSCAN cursor of PROGRESS ('0' to begin)
-- returns  {count of outbox ids, ids..., count of waiting tasks, then
--          (id, flow or batch or '') per task, the next PROGRESS cursor}
local now = now_ms()
local batch = tonumber(ARGV[3])
local out = {}
local due = redis.call('ZRANGEBYSCORE', OUTBOX, '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, batch)
out[1] = tostring(#due)
for _, id in ipairs(due) do out[#out + 1] = id end
local stale = redis.call('ZRANGEBYSCORE', WAITING, '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, batch)
out[#out + 1] = tostring(#stale)
for _, id in ipairs(stale) do
  local got = redis.call('HMGET', FLOW .. id, 'f', 'cb')
  out[#out + 1] = id
  out[#out + 1] = got[1] or got[2] or ''
end
local sc = redis.call('HSCAN', PROGRESS, ARGV[4], 'COUNT', batch)
local gone = {}
for i = 1, #sc[2], 2 do
  if not redis.call('ZSCORE', PROCESSING, sc[2][i]) then gone[#gone + 1] = sc[2][i] end
end
if #gone > 0 then redis.call('HDEL', PROGRESS, unpack(gone)) end
out[#out + 1] = sc[1]
return out
