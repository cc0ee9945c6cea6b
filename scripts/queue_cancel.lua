-- queue_cancel: find a task by id and remove it when it is pending or
-- scheduled (freeing its dedup key); say when it is running or dead. The
-- search reads the lists in chunks: O(N) in the tasks waiting, for an
-- operator's call, never for the hot path.
-- KEYS[1]  fleet:queue:<name>             list: pending bodies
-- KEYS[2]  fleet:queue:<name>:scheduled   zset: body -> ready_at (unix s)
-- KEYS[3]  fleet:queue:<name>:processing  zset: id -> deadline (unix s)
-- KEYS[4]  fleet:queue:<name>:dedup       hash: dedup key -> id (derived)
-- KEYS[5]  fleet:queue:<name>:dead        list: dead letters
-- KEYS[6]  fleet:queue:<name>:result:<id>  string: the record of a task done (optional)
-- KEYS[7]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms[ c]" (derived)
-- ARGV[1]  task id
-- returns  1 removed (pending or scheduled); 2 running: its lease entry,
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
local function free_dedup(v)
  if type(v.dedup) == 'string' and v.dedup ~= '' and redis.call('HGET', KEYS[4], v.dedup) == id then
    redis.call('HDEL', KEYS[4], v.dedup)
  end
end
local score = redis.call('ZSCORE', KEYS[3], id)
if score then
  -- Flag fleet's entry when it is the live reservation's (its deadline is
  -- the :processing score; a stale one, left by a client of the documented
  -- schema that re-reserved the task, is not flagged).
  local v = redis.call('HGET', KEYS[7], id)
  local dl = v and string.match(v, '^%S+ (%d+)$')
  if dl and math.floor(tonumber(score) * 1000 + 0.5) == tonumber(dl) then
    redis.call('HSET', KEYS[7], id, v .. ' c')
  end
  return 2
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  return 4
end
local chunk = 1000
local n = redis.call('LLEN', KEYS[1])
for i = 0, n - 1, chunk do
  for _, body in ipairs(redis.call('LRANGE', KEYS[1], i, i + chunk - 1)) do
    local ok, v = holds(body)
    if ok then
      redis.call('LREM', KEYS[1], 1, body)
      free_dedup(v)
      return 1
    end
  end
end
n = redis.call('ZCARD', KEYS[2])
for i = 0, n - 1, chunk do
  for _, body in ipairs(redis.call('ZRANGE', KEYS[2], i, i + chunk - 1)) do
    local ok, v = holds(body)
    if ok then
      redis.call('ZREM', KEYS[2], body)
      free_dedup(v)
      return 1
    end
  end
end
n = redis.call('LLEN', KEYS[5])
for i = 0, n - 1, chunk do
  for _, body in ipairs(redis.call('LRANGE', KEYS[5], i, i + chunk - 1)) do
    if holds(body) then return 3 end
  end
end
return 0
