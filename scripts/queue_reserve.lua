-- queue_reserve: move the due scheduled tasks onto the queue, then reserve up
-- to N tasks from its head, in one atomic step (a crash cannot lose a task
-- between the pop and the registration; racing reservers never get the same
-- task). A body that is not a JSON object with a non-empty string "id" is
-- poison: it goes to the dead letters, wrapped as
-- {"body": <raw body>, "error": <reason>, "dead_at": <unix s>}.
-- The call records the ids it reserved under KEYS[7] (PX lease), so that a
-- caller that gave up while the script was in flight can hand them back
-- (queue_abandon.lua); when KEYS[7] already exists, that caller gave up
-- before the script ran, and it takes nothing.
-- No TYPE checks: every key is read or written by a command that refuses a
-- wrong type before a write it would spoil, or the writes are undone
-- (see undo), so a wrong-type key changes nothing.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- KEYS[5]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[6]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[7]  fleet:queue:<name>:call:<prefix>     string: this call's record (derived)
-- KEYS[8]  fleet:queue:<name>:policy            string: the stored policy (derived)
-- ARGV[1]  N, how many tasks to reserve at most (>= 1)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  token prefix (random per call; the i-th task's token is prefix..i)
-- ARGV[4]  how many due scheduled tasks to move at most
-- ARGV[5]  bound on the dead letters' count when no policy is stored (0: none)
-- returns  {now_ms, 0, next_ready, poisoned, id1, token1, body1, ...}
--          next_ready is the earliest scheduled ready_at (unix s) when nothing
--          was reserved and something is scheduled, else ''
if redis.call('EXISTS', KEYS[7]) == 1 then
  return {'0', 0, '', 0}
end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', secs(now), 'LIMIT', 0, tonumber(ARGV[4]))
if #due > 0 then
  redis.call('RPUSH', KEYS[1], unpack(due)) -- first: a wrong-type list refuses it
  redis.call('ZREM', KEYS[5], unpack(due))
end
local out = {tostring(now), 0, '', 0}
local deadline = now + tonumber(ARGV[2])
local score = secs(deadline)
local poisoned = 0
local popped = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if popped then
  local ids, dead = {}, {}
  -- undo hands everything back when a write fails on a wrong-type key.
  local function undo(e)
    for _, id in ipairs(ids) do
      redis.pcall('ZREM', KEYS[2], id)
      redis.pcall('HDEL', KEYS[3], id)
      redis.pcall('HDEL', KEYS[4], id)
    end
    for _ = 1, #dead do redis.pcall('RPOP', KEYS[6]) end
    for i = #popped, 1, -1 do redis.call('LPUSH', KEYS[1], popped[i]) end
    return redis.error_reply(e.err or tostring(e))
  end
  for i, body in ipairs(popped) do
    local ok, v = pcall(cjson.decode, body)
    local why
    if not ok then
      why = 'body is not JSON'
    elseif type(v) ~= 'table' then
      why = 'body is not a JSON object'
    elseif type(v.id) ~= 'string' or v.id == '' then
      why = 'body has no usable id'
    end
    local r
    if why then
      r = redis.pcall('RPUSH', KEYS[6], cjson.encode({body = body, error = why, dead_at = now / 1000}))
      if type(r) == 'table' and r.err then return undo(r) end
      dead[#dead + 1] = body
      poisoned = poisoned + 1
    else
      local token = ARGV[3] .. i
      r = redis.pcall('ZADD', KEYS[2], score, v.id)
      if type(r) == 'table' and r.err then return undo(r) end
      ids[#ids + 1] = v.id
      r = redis.pcall('HSET', KEYS[3], v.id, body)
      if type(r) == 'table' and r.err then return undo(r) end
      r = redis.pcall('HSET', KEYS[4], v.id, lease_entry(token, deadline))
      if type(r) == 'table' and r.err then return undo(r) end
      out[#out + 1] = v.id
      out[#out + 1] = token
      out[#out + 1] = body
    end
  end
  if poisoned > 0 then
    local bound = policy(KEYS[8], {dead_max = tonumber(ARGV[5])}).dead_max
    if bound > 0 then
      redis.call('LTRIM', KEYS[6], -bound, -1)
    end
  end
  if #ids > 0 then
    redis.call('SET', KEYS[7], table.concat(ids, ' '), 'PX', ARGV[2])
  end
end
if #out == 4 then
  local nxt = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if #nxt > 0 then
    out[3] = nxt[2]
  end
end
out[4] = poisoned
return out
