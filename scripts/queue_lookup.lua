-- queue_lookup: find a task by id, wherever it is (a pending one on the
-- documented list, in its priorities or in a group: find_pending). Reads
-- the waiting lists in chunks: O(N) in the tasks waiting and dead, for an
-- operator's call.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:result:<id>       string: the record of a task done (optional)
-- ARGV[1]  task id
-- returns  {'active', body, lease entry or '', deadline (unix s), progress
--          entry or ''}, {'done', record} (a tracked task's record that has a
--          "status" ended otherwise), {'waiting', body, flow id or '',
--          dependency ref, its state, ...} (a tracked task waiting for its
--          dependencies: docs/FLOWS.md), {'pending', body},
--          {'scheduled', body, ready_at}, {'dead', entry} (the latest), or
--          {'none'}
local id = ARGV[1]
local function holds(body)
  if not string.find(body, id, 1, true) then return false end
  local ok, v = pcall(cjson.decode, body)
  return ok and type(v) == 'table' and v.id == id
end
local deadline = redis.call('ZSCORE', PROCESSING, id)
if deadline then
  return {'active', redis.call('HGET', BODY, id) or '', redis.call('HGET', LEASE, id) or '', deadline,
    redis.call('HGET', PROGRESS, id) or ''}
end
local done = redis.call('GET', KEYS[9])
if done then
  return {'done', done}
end
local rec = redis.call('HGETALL', FLOW .. id)
local state = {}
for i = 1, #rec, 2 do state[rec[i]] = rec[i + 1] end
if state.s == 'w' then
  local out = {'waiting', state.b or '', state.f or ''}
  for i = 1, #rec, 2 do
    if string.sub(rec[i], 1, 2) == 'd:' then
      out[#out + 1] = string.sub(rec[i], 3)
      out[#out + 1] = rec[i + 1]
    end
  end
  return out
end
local chunk = 1000
local pending = find_pending(holds)
if pending then return {'pending', pending} end
local n = redis.call('ZCARD', SCHEDULED)
for i = 0, n - 1, chunk do
  local page = redis.call('ZRANGE', SCHEDULED, i, i + chunk - 1, 'WITHSCORES')
  for j = 1, #page, 2 do
    if holds(page[j]) then return {'scheduled', page[j], page[j + 1]} end
  end
end
n = redis.call('LLEN', DEAD)
for i = n - 1, 0, -chunk do
  local from = math.max(i - chunk + 1, 0)
  local page = redis.call('LRANGE', DEAD, from, i)
  for j = #page, 1, -1 do
    if holds(page[j]) then return {'dead', page[j]} end
  end
end
return {'none'}
