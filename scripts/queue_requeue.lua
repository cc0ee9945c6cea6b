-- queue_requeue: end expired reservations that nobody ended meanwhile: each
-- goes back onto the queue, or to the dead letters past max attempts. Each
-- item is applied only if the reservation is still the one the sweeper saw
-- (same lease token, same body) and still past its deadline, so sweepers
-- racing each other, or a late ack, never duplicate or resurrect a task.
-- A task goes back where enqueue routes it (a group's task to its group's
-- head, so a sequential group keeps its order), and its permits come back
-- (task_done).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  bound on the dead letters' count (0: none)
-- ARGV[2..] one item per 7 values: id, lease entry as seen ('' for none),
--          body as seen, new body (to bury: without "dead_at", which the
--          server's clock fills in), '1' to bury it, 'c' to bury it as
--          cancelled, or '0' to re-queue it, dedup key or '', and the
--          delay in ms of a re-queue (the queue's or the task's declared
--          Backoff): '0' puts it back at once, more schedules it (but for
--          a task of a sequential group, whose order holds: at once)
-- The end of a tracked task that is buried is passed on (flow_ended), and
-- the progress value of every task handled goes.
-- returns  {requeued, buried}
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local ms = now_ms()
local now = ms / 1000
local requeued, buried = 0, 0
for i = 2, #ARGV, 7 do
  local id, token, seen, body, bury, dedup = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local delay = tonumber(ARGV[i + 6])
  local score = tonumber(redis.call('ZSCORE', PROCESSING, id))
  local held = redis.call('HGET', LEASE, id) or ''
  if score and score < now and held == token and redis.call('HGET', BODY, id) == seen then
    redis.call('ZREM', PROCESSING, id)
    redis.call('HDEL', BODY, id)
    redis.call('HDEL', LEASE, id)
    local tok = string.match(held, '^(%S+)')
    if tok then
      redis.call('HDEL', LEASE, record(prefix_of(tok)))
    end
    local v = routed(body)
    local g = group_of(v)
    task_done(id, g)
    if bury ~= '0' then
      redis.call('RPUSH', DEAD, with_dead_at(body, ms))
      free_dedup(dedup, id)
      buried = buried + 1
      local fl = flow_flags(body, v)
      local why = ''
      if fl ~= '' then
        local ok, e = pcall(cjson.decode, body)
        if ok and type(e) == 'table' and type(e.error) == 'string' then why = e.error end
      end
      flow_ended(id, 'p' .. fl, bury == 'c' and 'c' or 'x', why)
    elseif delay > 0 and not (g and group_limit(g, group_defaults(redis.call('GET', POLICY))).c == 1) then
      redis.call('ZADD', SCHEDULED, secs(ms + delay), body)
      requeued = requeued + 1
      flow_ended(id, 'p')
    else
      enqueue(body, v, ms, g ~= nil) -- a group's goes first: its order holds
      requeued = requeued + 1
      flow_ended(id, 'p')
    end
  end
end
local bound = tonumber(ARGV[1])
if buried > 0 and bound > 0 then
  redis.call('LTRIM', DEAD, -bound, -1)
end
return {requeued, buried}
