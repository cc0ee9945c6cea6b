-- queue_requeue: end expired reservations that nobody ended meanwhile: each
-- goes back onto the queue, or to the dead letters past max attempts. Each
-- item is applied only if the reservation is still the one the sweeper saw
-- (same lease token, same body) and still past its deadline, so sweepers
-- racing each other, or a late ack, never duplicate or resurrect a task.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- KEYS[5]  fleet:queue:<name>:dead              list: dead letters
-- KEYS[6]  fleet:queue:<name>:dedup             hash: dedup key -> id (derived)
-- ARGV[1]  bound on the dead letters' count (0: none)
-- ARGV[2..] one item per 6 values: id, lease entry as seen ('' for none),
--          body as seen, new body (to bury: without "dead_at", which the
--          server's clock fills in), '1' to bury it or '0' to re-queue it,
--          dedup key or ''
-- returns  {requeued, buried}
local err = wrong_types({'list', 'zset', 'hash', 'hash', 'list', 'hash'})
if err then return err end
local ms = now_ms()
local now = ms / 1000
local requeued, buried = 0, 0
for i = 2, #ARGV, 6 do
  local id, token, seen, body, bury, dedup = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local score = tonumber(redis.call('ZSCORE', KEYS[2], id))
  local held = redis.call('HGET', KEYS[4], id) or ''
  if score and score < now and held == token and redis.call('HGET', KEYS[3], id) == seen then
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    local tok = string.match(held, '^(%S+)')
    if tok then
      redis.call('HDEL', KEYS[4], record(prefix_of(tok)))
    end
    if bury == '1' then
      redis.call('RPUSH', KEYS[5], with_dead_at(body, ms))
      if dedup ~= '' and redis.call('HGET', KEYS[6], dedup) == id then
        redis.call('HDEL', KEYS[6], dedup)
      end
      buried = buried + 1
    else
      redis.call('RPUSH', KEYS[1], body)
      requeued = requeued + 1
    end
  end
end
local bound = tonumber(ARGV[1])
if buried > 0 and bound > 0 then
  redis.call('LTRIM', KEYS[5], -bound, -1)
end
return {requeued, buried}
