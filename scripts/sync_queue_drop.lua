-- sync_queue_drop: the last step of Sync's :dedup rebuild: remove, or
-- point at a live task, the entries that no live task confirmed during the
-- walk (sync_queue_walk.lua). Each entry is changed only if it still names
-- the id that Sync saw before the walk (else a submit, ack or another Sync
-- changed it meanwhile) and that id is not in flight now.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV     triples: dedup key, the id its entry named, the id of a live task
--          seen carrying the key ('' for none: the entry is removed)
-- returns  {removed, re-pointed}
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local removed, fixed = 0, 0
for i = 1, #ARGV, 3 do
  local key, id, live = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', DEDUP, key) == id and redis.call('HEXISTS', BODY, id) == 0 then
    if live == '' then
      redis.call('HDEL', DEDUP, key)
      removed = removed + 1
    else
      redis.call('HSET', DEDUP, key, live)
      fixed = fixed + 1
    end
  end
end
return {removed, fixed}
