-- queue_cancel: find a task by id and remove it when it is pending (on
-- the documented list, in its priorities or in a group: find_pending) or
-- scheduled (freeing its dedup key); say when it is running or dead. The
-- search reads the lists in chunks: O(N) in the tasks waiting, for an
-- operator's call, never for the hot path.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:result:<id>       string: the record of a task done (optional)
-- ARGV[1]  task id
-- ARGV[2]  the error a cancelled tracked task's end records (ErrCanceled's
--          text)
-- A tracked task (docs/FLOWS.md) that waits for its dependencies, or is
-- pending or scheduled, is cancelled, and its end passed on (flow_ended):
-- its dependents and its flow are told.
-- returns  1 removed (waiting, pending or scheduled); 2 running: its lease entry,
--          when fleet made the reservation, gets the flag " c", which its
--          holder's next extension reports and the sweeper honours (the
--          caller also tells the worker at once, by pub/sub); 3 dead
--          (nothing changes); 4 done, its record retained (nothing
--          changes); 0 not found
local id = ARGV[1]
local needle = id
-- holds reports whether body is the task's.
local function holds(body)
  if not string.find(body, needle, 1, true) then return false end
  local ok, v = pcall(cjson.decode, body)
  return ok and type(v) == 'table' and v.id == id, v
end
-- dedup_of is body v's dedup key, '' for none.
local function dedup_of(v)
  if type(v.dedup) == 'string' then return v.dedup end
  return ''
end
local waiting = redis.call('HMGET', FLOW .. id, 's', 'keep')
if waiting[1] == 'w' then
  flow_ended(id, 't' .. (waiting[2] or '0'), 'c', ARGV[2])
  return 1
end
local score = redis.call('ZSCORE', PROCESSING, id)
if score then
  -- Flag fleet's entry when it is the live reservation's (its deadline is
  -- the :processing score; a stale one, left by a client of the documented
  -- schema that re-reserved the task, is not flagged).
  local v = redis.call('HGET', LEASE, id)
  local dl = v and string.match(v, '^%S+ (%d+)$')
  if dl and math.floor(tonumber(score) * 1000 + 0.5) == tonumber(dl) then
    redis.call('HSET', LEASE, id, v .. ' c')
  end
  return 2
end
local done = redis.call('GET', KEYS[9])
if done then
  if string.find(done, '"status":', 1, true) then return 3 end -- a tracked task's end that was not a success
  return 4
end
local chunk = 1000
local body, where = find_pending(function(b) return (holds(b)) end)
if body then
  local _, v = holds(body)
  if where then
    redis.call('LREM', where, 1, body)
    if where ~= PENDING and redis.call('DECR', GPENDING) <= 0 then redis.call('DEL', GPENDING) end
  else
    redis.call('ZREM', PRIO, body)
  end
  free_dedup(dedup_of(v), id)
  flow_ended(id, flow_flags(body, v), 'c', ARGV[2])
  return 1
end
local n = redis.call('ZCARD', SCHEDULED)
for i = 0, n - 1, chunk do
  for _, body in ipairs(redis.call('ZRANGE', SCHEDULED, i, i + chunk - 1)) do
    local ok, v = holds(body)
    if ok then
      redis.call('ZREM', SCHEDULED, body)
      free_dedup(dedup_of(v), id)
      flow_ended(id, flow_flags(body, v), 'c', ARGV[2])
      return 1
    end
  end
end
n = redis.call('LLEN', DEAD)
for i = 0, n - 1, chunk do
  for _, body in ipairs(redis.call('LRANGE', DEAD, i, i + chunk - 1)) do
    if holds(body) then return 3 end
  end
end
return 0
