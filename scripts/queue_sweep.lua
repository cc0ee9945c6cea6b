-- queue_sweep: move the due scheduled tasks onto the queue (move_due: a
-- group's or a prioritized one where enqueue routes it), and list the
-- reservations past their deadline (for queue_requeue, which re-checks each).
-- A reservation whose body is missing cannot be re-queued: it is dropped.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  how many due scheduled tasks to move at most
-- ARGV[2]  how many expired reservations to list at most
-- returns  {moved, id1, lease1, body1, ...}; lease is the raw lease entry,
--          '' for a reservation that fleet did not make (another client's)
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local ms = now_ms()
local nows = secs(ms)
local out = {move_due(ms, tonumber(ARGV[1]))}
local expired = redis.call('ZRANGEBYSCORE', PROCESSING, '-inf', '(' .. nows, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  local body = redis.call('HGET', BODY, id)
  if body then
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', LEASE, id) or ''
    out[#out + 1] = body
  else
    redis.call('ZREM', PROCESSING, id)
    redis.call('HDEL', LEASE, id)
  end
end
return out
