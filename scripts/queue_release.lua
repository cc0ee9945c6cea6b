-- queue_release: end a reservation without counting an attempt, if the
-- reservation that exists now is the caller's: the body goes back,
-- unchanged, to the head of the queue (it was interrupted, not failed).
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms" (derived)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- returns  1 when released; 0 when the lease is lost: then nothing changes
local err = wrong_types({'list', 'zset', 'hash', 'hash'})
if err then return err end
if not owns(KEYS[2], KEYS[4], ARGV[1], ARGV[2]) then
  return 0
end
local body = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1], record(prefix_of(ARGV[2]))) -- and the reserve call's record
if body then
  redis.call('LPUSH', KEYS[1], body)
end
return 1
