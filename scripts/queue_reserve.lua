-- queue_reserve: move the due scheduled tasks onto the queue, then reserve up
-- to N tasks from its head, in one atomic step (a crash cannot lose a task
-- between the pop and the registration; racing reservers never get the same
-- task). A body that is not a JSON object with a non-empty string "id" is
-- poison: it goes to the dead letters, wrapped as
-- {"body": <raw body>, "error": <reason>, "dead_at": <unix s>}.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- KEYS[5]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[6]  fleet:queue:<name>:dead              list: dead letters
-- ARGV[1]  N, how many tasks to reserve at most (>= 1)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  token prefix (random per call; the i-th task's token is prefix..i)
-- ARGV[4]  how many due scheduled tasks to move at most
-- ARGV[5]  bound on the dead letters' count (0: none)
-- returns  {now_ms, pending_left, next_ready, poisoned, id1, token1, body1, ...}
--          next_ready is the earliest scheduled ready_at (unix s) when nothing
--          was reserved and something is scheduled, else ''
local err = wrong_types({'list', 'zset', 'hash', 'hash', 'zset', 'list'})
if err then return err end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', string.format('%.3f', now / 1000), 'LIMIT', 0, tonumber(ARGV[4]))
if #due > 0 then
  redis.call('ZREM', KEYS[5], unpack(due))
  redis.call('RPUSH', KEYS[1], unpack(due))
end
local out = {tostring(now), 0, '', 0}
local deadline = string.format('%.3f', (now + tonumber(ARGV[2])) / 1000)
local poisoned = 0
local popped = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if popped then
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
    if why then
      redis.call('RPUSH', KEYS[6], cjson.encode({body = body, error = why, dead_at = now / 1000}))
      poisoned = poisoned + 1
    else
      local token = ARGV[3] .. i
      redis.call('ZADD', KEYS[2], deadline, v.id)
      redis.call('HSET', KEYS[3], v.id, body)
      redis.call('HSET', KEYS[4], v.id, token)
      out[#out + 1] = v.id
      out[#out + 1] = token
      out[#out + 1] = body
    end
  end
  local bound = tonumber(ARGV[5])
  if poisoned > 0 and bound > 0 then
    redis.call('LTRIM', KEYS[6], -bound, -1)
  end
end
out[2] = redis.call('LLEN', KEYS[1])
if #out == 4 then
  local nxt = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if #nxt > 0 then
    out[3] = nxt[2]
  end
end
out[4] = poisoned
return out
