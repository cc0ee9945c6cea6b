-- flow_cancel_tasks: cancel tasks of a flow that is being cancelled, in
-- this queue (or shard) (docs/FLOWS.md, "Cancel of a flow"). Pass 'w'
-- cancels those still waiting for their dependencies (first, so that no
-- cancelled dependency can release one, whatever its policy); pass 'q'
-- takes those that are queued off their list (the documented list, the
-- priorities, their group's list, SCHEDULED), or flags those running as
-- Queue.Cancel does (queue_cancel.lua), for their workers to stop. Each
-- cancelled task's end is passed on (flow_ended). Finding the queued ones
-- reads the lists once for all the ids: O(N) in the tasks waiting.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  'w' or 'q'
-- ARGV[2]  the error a cancelled task's end records
-- ARGV[3..] the tasks' ids
-- returns  one char per id: '0' nothing done, '1' cancelled, 'r' running
--          (flagged: the caller tells its worker)
local pass, why = ARGV[1], ARGV[2]
local out, want, left = {}, {}, 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local got = redis.call('HMGET', FLOW .. id, 's', 'keep')
  out[i - 2] = '0'
  if pass == 'w' and got[1] == 'w' then
    flow_ended(id, 't' .. (got[2] or '0'), 'c', why, 0)
    out[i - 2] = '1'
  elseif pass == 'q' and got[1] == 'q' then
    local score = redis.call('ZSCORE', PROCESSING, id)
    if score then
      local v = redis.call('HGET', LEASE, id)
      local dl = v and string.match(v, '^%S+ (%d+)$')
      if dl and math.floor(tonumber(score) * 1000 + 0.5) == tonumber(dl) then
        redis.call('HSET', LEASE, id, v .. ' c')
      end
      out[i - 2] = 'r'
    else
      want[id] = i - 2
      left = left + 1
    end
  end
end
-- found removes a queued body of a wanted task from key (a list, or
-- SCHEDULED / PRIO for a zset) and passes on its end.
local function found(body, key, zset)
  local id = flow_body_id(body)
  local at = id and want[id]
  if not at then return end
  if zset then
    redis.call('ZREM', key, body)
  else
    redis.call('LREM', key, 1, body)
    if key ~= PENDING and redis.call('DECR', GPENDING) <= 0 then redis.call('DEL', GPENDING) end
  end
  local ok, v = pcall(cjson.decode, body)
  if ok and type(v) == 'table' and type(v.dedup) == 'string' then free_dedup(v.dedup, id) end
  flow_ended(id, flow_flags(body, ok and type(v) == 'table' and v or nil), 'c', why, 0)
  want[id] = nil
  left = left - 1
  out[at] = '1'
end
local function scan_list(key)
  local n = redis.call('LLEN', key)
  local bodies = {}
  for i = 0, n - 1, 1000 do
    for _, b in ipairs(redis.call('LRANGE', key, i, i + 999)) do bodies[#bodies + 1] = b end
  end
  for _, b in ipairs(bodies) do
    if left == 0 then return end
    found(b, key, false)
  end
end
local function scan_zset(key)
  local bodies = redis.call('ZRANGE', key, 0, -1)
  for _, b in ipairs(bodies) do
    if left == 0 then return end
    found(b, key, true)
  end
end
if left > 0 then scan_list(PENDING) end
if left > 0 then scan_zset(PRIO) end
if left > 0 then
  for _, g in ipairs(redis.call('HKEYS', GSTATE)) do
    if left == 0 then break end
    if g ~= '' and g ~= CAP_WAIT then scan_list(GROUP .. g) end
  end
end
if left > 0 then scan_zset(SCHEDULED) end
return table.concat(out)
