-- queue_dead_requeue: move dead letters back onto the queue. Each is moved
-- only if it is still in the dead letters (exact match), so two callers
-- never requeue one twice. A task that was submitted with a dedup key gets
-- its key back; when another live task holds that key now, the dead letter
-- stays where it is (re-queueing it would make the duplicate that the key
-- exists to prevent). A task goes where enqueue routes it (its group, its
-- priority).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV     quads: the dead entry exactly as stored, the body to push, the
--          task's id, its dedup key or ''
-- returns  {moved, held1, holder1, ...}: how many were moved, and for each
--          one left because its key is held, its id and the holder's id
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local out = {0}
for i = 1, #ARGV, 4 do
  local raw, body, id, dedup = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local holder = dedup ~= '' and redis.call('HGET', DEDUP, dedup)
  if holder and holder ~= id then
    out[#out + 1] = id
    out[#out + 1] = holder
  elseif redis.call('LREM', DEAD, 1, raw) == 1 then
    enqueue(body, nil, now_ms(), false)
    if dedup ~= '' then
      redis.call('HSET', DEDUP, dedup, id)
    end
    out[1] = out[1] + 1
  end
end
return out
