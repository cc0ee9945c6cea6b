-- queue_submit_unique: push one task with a dedup key held for a window
-- after the task ends (SubmitOptions.UniqueFor): refused while a live task
-- holds the key (:dedup) or while the window of an ended one runs
-- (:unique:<key>). Otherwise as queue_submit.lua.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[3]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- KEYS[4]  fleet:queue:<name>:unique:<key>      string: id of the task that held it, PX window (optional)
-- ARGV[1]  task id
-- ARGV[2]  body (with "dedup" and "unique_ms")
-- ARGV[3]  dedup key
-- ARGV[4]  ready_at (unix s), or '' for now
-- returns  ARGV[1] when pushed, or the id of the task that holds the key
--          (then nothing changes)
local first = redis.call('HGET', KEYS[3], ARGV[3])
if first then
  return first
end
first = redis.call('GET', KEYS[4])
if first then
  return first
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
else
  redis.call('RPUSH', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[1])
return ARGV[1]
