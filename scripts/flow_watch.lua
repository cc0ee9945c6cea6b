-- flow_watch: look at a task that a new task depends on, and, when it is
-- tracked and has not ended, add the new task to its dependents (docs/
-- FLOWS.md, "Submitting", steps 0 and 3).
-- KEYS[1..8] the queue's keys of the dependency's shard
-- KEYS[9]  fleet:queue:<name>:result:<id>  string: the dependency's end record
-- ARGV[1]  the dependency's id
-- ARGV[2]  the dependent's ref, to add to its dependents; '' to only look
-- returns  {'live'}: tracked and not ended (the ref was added); {'ok',
--          result}, {'x', error}, {'c', error}: tracked, ended, its end
--          not yet passed on; {'rec', end record}: ended, its end recorded;
--          {'plain'}: waiting or running, not tracked; {'dead', dead
--          letter}: in the dead letters, not tracked; {'none'}: not known
local id, ref = ARGV[1], ARGV[2]
local got = redis.call('HMGET', FLOW .. id, 's', 'res', 'err')
local s = got[1]
if s == 'w' or s == 'q' then
  if ref ~= '' then
    redis.call('SADD', FOUT .. id, ref)
    -- A dependent from outside its submit: should the submit be aborted,
    -- the dependent must be told (flow_drop.lua).
    redis.call('HSET', FLOW .. id, 'xo', '1')
  end
  return {'live'}
elseif s == 'ok' then
  return {'ok', got[2] or 'null'}
elseif s == 'x' or s == 'c' then
  return {s, got[3] or ''}
end
local done = redis.call('GET', KEYS[9])
if done then return {'rec', done} end
local function holds(body)
  if not string.find(body, id, 1, true) then return false end
  return flow_body_id(body) == id
end
if redis.call('ZSCORE', PROCESSING, id) or find_pending(holds) then return {'plain'} end
local n = redis.call('ZCARD', SCHEDULED)
for i = 0, n - 1, 1000 do
  for _, body in ipairs(redis.call('ZRANGE', SCHEDULED, i, i + 999)) do
    if holds(body) then return {'plain'} end
  end
end
n = redis.call('LLEN', DEAD)
for i = n - 1, 0, -1000 do
  local page = redis.call('LRANGE', DEAD, math.max(i - 999, 0), i)
  for j = #page, 1, -1 do
    if holds(page[j]) then return {'dead', page[j]} end
  end
end
return {'none'}
