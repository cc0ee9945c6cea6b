-- queue_find: one page of a metadata index (QueueOptions.IndexMeta,
-- Queue.FindByMeta): the ids after a cursor, in id order (UUIDv7: submit
-- order), each with where its task is, read as queue_lookup.lua answers.
-- A task active or done is found at once; the others (pending, scheduled,
-- dead) in one pass over the waiting and dead tasks that stops once each
-- is found (O(N) in those tasks when one is not active: an operator's
-- call). An entry whose task is nowhere is pruned: its task is gone.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:meta:<key>:<canon>  zset: the index (members
--          task ids, score 0)
-- ARGV[1]  the cursor: the last id of the previous page, '' for the first
-- ARGV[2]  how many ids to read at most
-- returns  {last id read or '', 1 when it read ARGV[2] ids (more may
--          follow) else 0, then per task found {id, queue_lookup.lua's
--          answer...}}, in id order
local cursor, limit = ARGV[1], tonumber(ARGV[2])
local from = '-'
if cursor ~= '' then from = '(' .. cursor end
local ids = redis.call('ZRANGE', KEYS[9], from, '+', 'BYLEX', 'LIMIT', 0, limit)
local found, rest, left = {}, {}, 0
for _, id in ipairs(ids) do
  local deadline = redis.call('ZSCORE', PROCESSING, id)
  if deadline then
    found[id] = {'active', redis.call('HGET', BODY, id) or '', redis.call('HGET', LEASE, id) or '', deadline,
      redis.call('HGET', PENDING .. ':progress', id) or ''}
  else
    local done = redis.call('GET', PENDING .. ':result:' .. id)
    if done then
      found[id] = {'done', done}
    else
      rest[id] = true
      left = left + 1
    end
  end
end
local function take(body, what)
  local id = flow_body_id(body) -- (lib_flow.lua)
  if id and rest[id] then
    rest[id] = nil
    left = left - 1
    found[id] = what(body)
  end
  return left == 0
end
if left > 0 then
  find_pending(function(body)
    return take(body, function(b) return {'pending', b} end)
  end)
end
local chunk = 1000
if left > 0 then
  local n = redis.call('ZCARD', SCHEDULED)
  for i = 0, n - 1, chunk do
    local page = redis.call('ZRANGE', SCHEDULED, i, i + chunk - 1, 'WITHSCORES')
    for j = 1, #page, 2 do
      if take(page[j], function(b) return {'scheduled', b, page[j + 1]} end) then break end
    end
    if left == 0 then break end
  end
end
if left > 0 then
  -- The latest dead letter of a task: read from the tail.
  local n = redis.call('LLEN', DEAD)
  for i = n - 1, 0, -chunk do
    local page = redis.call('LRANGE', DEAD, math.max(i - chunk + 1, 0), i)
    for j = #page, 1, -1 do
      if take(page[j], function(b) return {'dead', b} end) then break end
    end
    if left == 0 then break end
  end
end
local out = {ids[#ids] or '', #ids == limit and 1 or 0}
local gone = {}
for _, id in ipairs(ids) do
  local f = found[id]
  if f then
    table.insert(f, 1, id)
    out[#out + 1] = f
  else
    gone[#gone + 1] = id
  end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[9], unpack(gone))
end
return out
