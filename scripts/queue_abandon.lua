-- queue_abandon: hand back what a reserve call took when its caller gave up
-- while the script was in flight (its ctx ended, or its connection broke):
-- each task that the call reserved, and that is still reserved under the
-- call's tokens, goes back unchanged to the head of the queue, without
-- counting an attempt (a group's to its group's head, with its permits
-- back: enqueue, task_done); one that Queue.Cancel flagged meanwhile (canceled)
-- stays reserved, for the sweeper to bury as cancelled once its lease runs
-- out. When the call's script has not run yet, a tombstone in its place
-- makes it take nothing when it does. Given ids, it hands back only
-- those of the call's tasks (the shares of a group call whose callers
-- left: queue_callgroup.go; the call ran, its reply came), and keeps the
-- call's record of the others.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:call:<prefix>     string: the call's tombstone (derived)
-- ARGV[1]  the call's token prefix
-- ARGV[2]  how long the tombstone lives, in milliseconds
-- ARGV[3..] the ids to hand back (none: all that the call took)
-- returns  how many tasks went back; -1 when the call had not run (tombstoned)
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local rec = redis.call('HGET', LEASE, record(ARGV[1]))
local ids
if #ARGV > 2 then
  ids = {unpack(ARGV, 3)}
  if rec then
    -- The record keeps the call's other tasks (an end of any of them
    -- deletes it, as the sweeper does); none left, it goes.
    local ok, all = pcall(cjson.decode, rec)
    local gone, rest = {}, {}
    for _, id in ipairs(ids) do gone[id] = true end
    for _, id in ipairs(ok and type(all) == 'table' and all or {}) do
      if not gone[id] then rest[#rest + 1] = id end
    end
    if #rest > 0 then
      redis.call('HSET', LEASE, record(ARGV[1]), cjson.encode(rest))
    else
      redis.call('HDEL', LEASE, record(ARGV[1]))
    end
  end
else
  if not rec then
    -- Not run yet, or run and already ended (its tasks acked): either way a
    -- tombstone is right.
    redis.call('SET', KEYS[9], '', 'PX', ARGV[2])
    return -1
  end
  redis.call('HDEL', LEASE, record(ARGV[1]))
  local ok
  ok, ids = pcall(cjson.decode, rec)
  if not ok or type(ids) ~= 'table' then ids = {} end
end
local back = 0
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
