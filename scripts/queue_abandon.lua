-- queue_abandon: hand back what a reserve call took when its caller gave up
-- while the script was in flight (its ctx ended, or its connection broke):
-- each task that the call reserved, and that is still reserved under the
-- call's tokens, goes back unchanged to the head of the queue, without
-- counting an attempt (a group's to its group's head, with its permits
-- back: enqueue, task_done); one that Queue.Cancel flagged meanwhile (canceled)
-- stays reserved, for the sweeper to bury as cancelled once its lease runs
-- out. When the call's script has not run yet, a tombstone in its place
-- makes it take nothing when it does.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:call:<prefix>     string: the call's tombstone (derived)
-- ARGV[1]  the call's token prefix
-- ARGV[2]  how long the tombstone lives, in milliseconds
-- returns  how many tasks went back; -1 when the call had not run (tombstoned)
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local rec = redis.call('HGET', LEASE, record(ARGV[1]))
if not rec then
  -- Not run yet, or run and already ended (its tasks acked): either way a
  -- tombstone is right.
  redis.call('SET', KEYS[9], '', 'PX', ARGV[2])
  return -1
end
redis.call('HDEL', LEASE, record(ARGV[1]))
local back = 0
local ok, ids = pcall(cjson.decode, rec)
if not ok or type(ids) ~= 'table' then ids = {} end
for i = #ids, 1, -1 do -- back to the head in their order
  local id = ids[i]
  local v = redis.call('HGET', LEASE, id)
  local tok = v and string.match(v, '^(%S+)')
  if tok and string.sub(tok, 1, #ARGV[1]) == ARGV[1] and not canceled(v) and owns(id, tok) then
    local body = redis.call('HGET', BODY, id)
    redis.call('ZREM', PROCESSING, id)
    redis.call('HDEL', BODY, id)
    redis.call('HDEL', LEASE, id)
    if body then
      local v = routed(body)
      local g = group_of(v)
      task_done(id, g)
      enqueue(body, v, now_ms(), true)
      back = back + 1
    end
  end
end
return back
