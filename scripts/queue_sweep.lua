-- queue_sweep: move the due scheduled tasks onto the queue, and list the
-- reservations past their deadline (for queue_requeue, which re-checks each).
-- A reservation whose body is missing cannot be re-queued: it is dropped.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline (unix s)
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> lease token (derived)
-- KEYS[5]  fleet:queue:<name>:scheduled         zset: body -> ready_at (unix s)
-- ARGV[1]  how many due scheduled tasks to move at most
-- ARGV[2]  how many expired reservations to list at most
-- returns  {moved, id1, lease1, body1, ...}; lease is the raw lease entry,
--          '' for a reservation that fleet did not make (another client's)
local err = wrong_types({'list', 'zset', 'hash', 'hash', 'zset'})
if err then return err end
local nows = secs(now_ms())
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', nows, 'LIMIT', 0, tonumber(ARGV[1]))
if #due > 0 then
  redis.call('RPUSH', KEYS[1], unpack(due))
  redis.call('ZREM', KEYS[5], unpack(due))
end
local out = {#due}
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. nows, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  local body = redis.call('HGET', KEYS[3], id)
  if body then
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[4], id) or ''
    out[#out + 1] = body
  else
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[4], id)
  end
end
return out
