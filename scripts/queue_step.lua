-- queue_step: read or record a durable task's steps (Step and Sleep,
-- step.go), if the reservation that exists now is the caller's (owned):
-- a worker whose lease was taken over reads and records nothing. The
-- steps live in STEPS..id (hash: step name -> its record, JSON), ARGV[5]
-- ms from this write; the end of the task deletes them or gives them its
-- record's lifetime (ack_all, lib_queue.lua), told by the body's "lg",
-- which a record sets (as queue_log.lua does), so that a snooze or a
-- release, which keep the body, carries it.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the step's name; '' to read them all
-- ARGV[4]  the step's record (JSON), when ARGV[3] is set
-- ARGV[5]  the steps' lifetime in ms (>= 1), when ARGV[3] is set
-- ARGV[6]  "1": mark the body with "lg"
-- returns  {DONE, name, record, name, record, ...} (a read: every step
--          recorded; a record: none), or {LOST} (nothing changes)
local id, token = ARGV[1], ARGV[2]
if not owns(id, token) then return {LOST} end
local key = STEPS .. id
if ARGV[3] == '' then
  local out = redis.call('HGETALL', key)
  table.insert(out, 1, DONE)
  return out
end
redis.call('HSET', key, ARGV[3], ARGV[4])
redis.call('PEXPIRE', key, ARGV[5])
if ARGV[6] == '1' then
  -- The mark, unless the body has it: at its end (queue_log.lua, an
  -- earlier record), or among its sorted fields (a retry's body, which
  -- the caller rewrote with it).
  local body = redis.call('HGET', BODY, id)
  if body and string.sub(body, -1) == '}' and string.sub(body, -8) ~= ',"lg":1}' then
    local ok, v = pcall(cjson.decode, body)
    if not (ok and type(v) == 'table' and v.lg == 1) then
      redis.call('HSET', BODY, id, string.sub(body, 1, -2) .. ',"lg":1}')
    end
  end
end
return {DONE}
