-- queue_nack: end a reservation that failed, if the caller's lease is still
-- the task's: schedule a retry, or bury the task in the dead letters.
-- KEYS[1]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[2]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[3]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- KEYS[4]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- KEYS[5]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the new body (attempts counted; with "error", and "dead_at" when buried)
-- ARGV[4]  retry delay in milliseconds, or -1 to bury the task
-- ARGV[5]  the task's dedup key, or ''
-- ARGV[6]  bound on the dead letters' count (0: none)
-- returns  1 when done; 0 when the lease is lost: then nothing changes
local err = wrong_types({'zset', 'hash', 'hash', 'zset', 'list', 'hash'})
if err then return err end
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local delay = tonumber(ARGV[4])
if delay < 0 then
  redis.call('RPUSH', KEYS[5], ARGV[3])
  local bound = tonumber(ARGV[6])
  if bound > 0 then
    redis.call('LTRIM', KEYS[5], -bound, -1)
  end
  if ARGV[5] ~= '' and redis.call('HGET', KEYS[6], ARGV[5]) == ARGV[1] then
    redis.call('HDEL', KEYS[6], ARGV[5])
  end
else
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[4], string.format('%.3f', (now + delay) / 1000), ARGV[3])
end
return 1
