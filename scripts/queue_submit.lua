-- queue_submit: push one task with a dedup key and/or a ready time.
-- No TYPE checks: HGET refuses a wrong-type dedup hash, and the push (the
-- first write) a wrong-type list or zset, before anything changes.
-- KEYS[1]  fleet:queue:<name>            list: pending bodies
-- KEYS[2]  fleet:queue:<name>:scheduled  zset: body -> ready_at (unix s)
-- KEYS[3]  fleet:queue:<name>:dedup      hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  body
-- ARGV[3]  dedup key, or ''
-- ARGV[4]  ready_at (unix s), or '' for now
-- returns  the id of the task: ARGV[1] when pushed, or the id of the live
--          task that holds the same dedup key (then nothing changes)
if ARGV[3] ~= '' then
  local first = redis.call('HGET', KEYS[3], ARGV[3])
  if first then
    return first
  end
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
else
  redis.call('RPUSH', KEYS[1], ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[1])
end
return ARGV[1]
