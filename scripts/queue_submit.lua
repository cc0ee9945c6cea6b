-- queue_submit: push one task with a dedup key and/or a ready time. With a
-- dedup key, it is refused while a live task holds the key (DEDUP), and,
-- when the caller names the task's unique key (SubmitOptions.UniqueFor),
-- while the window of an ended task that held it runs.
-- No TYPE checks: HGET refuses a wrong-type dedup hash, and the push (the
-- first write) a wrong-type list or zset, before anything changes.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:unique:<key>  string: id of the task that held the
--          key, PX the window (optional: only with UniqueFor)
-- ARGV[1]  task id
-- ARGV[2]  body (with "dedup", and "unique_ms" with UniqueFor)
-- ARGV[3]  dedup key, or ''
-- ARGV[4]  ready_at (unix s), or '' for now
-- returns  the id of the task: ARGV[1] when pushed, or the id of the task
--          that holds the same dedup key (then nothing changes)
if ARGV[3] ~= '' then
  local first = redis.call('HGET', DEDUP, ARGV[3])
  if first then
    return first
  end
  if KEYS[9] then
    first = redis.call('GET', KEYS[9])
    if first then
      return first
    end
  end
end
if ARGV[4] ~= '' then
  redis.call('ZADD', SCHEDULED, ARGV[4], ARGV[2])
else
  redis.call('RPUSH', PENDING, ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', DEDUP, ARGV[3], ARGV[1])
end
return ARGV[1]
