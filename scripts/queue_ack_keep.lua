-- queue_ack_keep: queue_ack.lua for a task that leaves something behind:
-- its dedup key held for a window (SubmitOptions.UniqueFor: the body
-- carries "unique_ms"), and/or its result kept (QueueOptions.Retention). A
-- task with neither is acked by queue_ack.lua.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- KEYS[4]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- KEYS[5]  fleet:queue:<name>:unique:<key>      string: id, PX window (optional)
-- KEYS[6]  fleet:queue:<name>:result:<id>       string: the task's record, PX retention (optional)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the task's dedup key, or ''
-- ARGV[4]  the unique window in milliseconds, or '0'
-- ARGV[5]  the retention in milliseconds, or '0'
-- ARGV[6]  the result as JSON, or '' for none
-- ARGV[7]  the task's attempts
-- returns  1 when acked; 0 when the lease is lost: then nothing changes
if not owns(KEYS[1], KEYS[3], ARGV[1], ARGV[2]) then
  return 0
end
local holder = false
if ARGV[3] ~= '' then
  holder = redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[1]
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], record(prefix_of(ARGV[2])))
if holder then
  redis.call('HDEL', KEYS[4], ARGV[3])
  if tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[4])
  end
end
if tonumber(ARGV[5]) > 0 then
  local result = ARGV[6]
  if result == '' then result = 'null' end
  local worker = string.match(ARGV[2], '^(.*)/[^/]*$') or ''
  redis.call('SET', KEYS[6], '{"id":' .. cjson.encode(ARGV[1]) .. ',"result":' .. result ..
    ',"attempts":' .. ARGV[7] .. ',"done_at":' .. secs(now_ms()) .. ',"worker":' .. cjson.encode(worker) .. '}',
    'PX', ARGV[5])
end
return 1
