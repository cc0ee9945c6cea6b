-- queue_signal: send signal ARGV[2] to task ARGV[1] (Queue.Signal,
-- signal.go): kept in the task's steps (STEPS..id, "\255sig:<name>": the
-- fields of sig_ready, lib_queue.lua) until its WaitSignal takes it
-- (queue_step.lua), and a task parked waiting for it (queue_end.lua's
-- "\255park") is made ready at once. Each name is sent once. The task
-- must live: running (PROCESSING), parked, waiting for its dependencies
-- (FLOW..id), pending or scheduled; finding one of the last two reads the
-- waiting lists in chunks (O(N), as queue_lookup.lua does), which a
-- running or parked task (the usual one) never costs.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:result:<id>       string: the record of a task done (optional)
-- ARGV[1]  task id
-- ARGV[2]  the signal's name
-- ARGV[3]  its value: JSON, or a sealed value (a JSON string)
-- ARGV[4]  how long the steps keep it at least, in ms (>= 1)
-- ARGV[5]  '' (Queue.Signal), or 'child': the end of a child of the task
--          (AwaitChildren; name "\255c:<child id>"), passed on by the
--          flows' edge outbox (flow_drive.go), which may pass it on more
--          than once: it is kept whatever the task's state, without a look
--          for the task, when the task has steps (a parent that was acked
--          has none: the end goes nowhere)
-- returns  {'woken'}: kept, and the task, parked waiting for it (and for
--          nothing else not sent yet), is ready;
--          {'kept'}; {'sent', how}: the name was sent before ('d':
--          delivered, 't': its wait timed out, '': not yet delivered);
--          {'finished'}: the task ended (a record, a dead letter);
--          {'none'}: no such task here. Only the first two write.
local id, name = ARGV[1], ARGV[2]
local sk = STEPS .. id
local field = '\255sig:' .. name
local now = now_ms()
local park, pg = nil, nil
local live = redis.call('ZSCORE', PROCESSING, id) ~= false
if not live then
  local got = redis.call('HMGET', sk, '\255park', '\255pg')
  park, pg = got[1], got[2]
  if park and pg then
    -- Parked in a sequential group: at (or near: a task of a higher
    -- priority may go before it) its group's head, the group's permit
    -- held for it until its time.
    live = false
    for _, b in ipairs(redis.call('LRANGE', GROUP .. pg, 0, 15)) do
      if b == park then live = true break end
    end
  else
    live = park and redis.call('ZSCORE', SCHEDULED, park) ~= false
  end
  if not live then park = nil end
end
if ARGV[5] == 'child' then
  -- A parent that started children has steps (StartChild's) while it
  -- lives; an ack deleted them: then the end goes nowhere.
  if redis.call('EXISTS', sk) == 0 then return {'none'} end
  live = true
end
if not live then
  if redis.call('EXISTS', KEYS[9]) == 1 then return {'finished'} end
  live = redis.call('HGET', FLOW .. id, 's') == 'w'
end
if not live then
  local function holds(body)
    if not string.find(body, id, 1, true) then return false end
    local ok, v = pcall(cjson.decode, body)
    return ok and type(v) == 'table' and v.id == id
  end
  live = find_pending(holds) ~= nil
  local n = redis.call('ZCARD', SCHEDULED)
  for i = 0, n - 1, 1000 do
    if live then break end
    for _, b in ipairs(redis.call('ZRANGE', SCHEDULED, i, i + 999)) do
      if holds(b) then live = true break end
    end
  end
  if not live then
    n = redis.call('LLEN', DEAD)
    for i = 0, n - 1, 1000 do
      for _, b in ipairs(redis.call('LRANGE', DEAD, i, i + 999)) do
        if holds(b) then return {'finished'} end
      end
    end
    return {'none'}
  end
end
local had = redis.call('HGET', sk, field)
if had then
  if had == '\255d' then return {'sent', 'd'} end
  if had == '\255t' then return {'sent', 't'} end
  return {'sent', ''}
end
redis.call('HSET', sk, field, ARGV[3])
keep_for(sk, ARGV[4])
if park and sig_ready(sk) then
  redis.call('HDEL', sk, '\255park', '\255pg')
  if pg then
    -- Free the permit it holds, and end the group's block for it.
    redis.call('ZREM', GRUN .. pg, id)
    if redis.call('HGET', GSTATE, pg) == 'c' then group_unblock(pg) else redis.call('INCR', SIGNAL) end
    return {'woken'}
  end
  redis.call('ZREM', SCHEDULED, park)
  enqueue(park, nil, now, false)
  return {'woken'}
end
return {'kept'}
