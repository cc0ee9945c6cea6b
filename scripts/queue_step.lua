-- queue_step: read or record a durable task's steps (Step, Sleep and
-- WaitSignal: step.go, sleep.go, signal.go), if the reservation that
-- exists now is the caller's (owned): a worker whose lease was taken over
-- reads and records nothing. The steps live in STEPS..id (hash: step name
-- -> its record, JSON; and the fields of lib_queue.lua's sig_ready, whose
-- names start with the byte 255), at least ARGV[5] ms from this write;
-- the end of the task deletes them or gives them its record's lifetime
-- (ack_all, lib_queue.lua), told by the body's "lg", which a record sets
-- (as queue_log.lua does), so that a snooze or a release, which keep the
-- body, carries it.
-- A wait (ARGV[7] 'wait' or 'all') takes the signals ARGV[10..] when
-- every one was sent (in the same call: no signal is lost between the
-- look and the record), or ends the wait as timed out, or records the
-- wait and names its signals in "\255wait", for Signal
-- (queue_signal.lua) and the task's snooze (queue_end.lua) to see.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the step's name; '' to read them all
-- ARGV[4]  the step's record (JSON), when ARGV[3] is set; a wait's record
--          while it waits, written unless one is
-- ARGV[5]  the steps' lifetime in ms (>= 1), when ARGV[3] is set
-- ARGV[6]  "1": mark the body with "lg"
-- ARGV[7]  '' (a read or a record), 'wait' (WaitSignal: one signal, its
--          value the result) or 'all' (AwaitChildren: the result is the
--          array of their values, in order)
-- ARGV[8]  a wait: the taken record's JSON up to its result, to which the
--          result and '}' are appended
-- ARGV[9]  a wait: the timed-out record, once the wait's time passed; else ''
-- ARGV[10..] a wait: the names of the signals it waits for
-- returns  {DONE, name, record, name, record, ...} (a read: every step
--          recorded; a record: none); a wait: {DONE, 'signal', result},
--          {DONE, 'timeout'} or {DONE, 'wait'}; or {LOST} (nothing changes)
local id, token = ARGV[1], ARGV[2]
if not owns(id, token) then return {LOST} end
local key = STEPS .. id
if ARGV[3] == '' then
  local out = redis.call('HGETALL', key)
  table.insert(out, 1, DONE)
  return out
end
local out = {DONE}
if ARGV[7] ~= '' then
  local name, vals = ARGV[3], {}
  for j = 10, #ARGV do
    local v = redis.call('HGET', key, '\255sig:' .. ARGV[j])
    if not v or string.byte(v, 1) == 255 then
      vals = nil
      break
    end
    vals[#vals + 1] = v
  end
  if vals and #vals > 0 then
    local r = vals[1]
    if ARGV[7] == 'all' then r = '[' .. table.concat(vals, ',') .. ']' end
    redis.call('HSET', key, name, ARGV[8] .. r .. '}')
    for j = 10, #ARGV do redis.call('HSET', key, '\255sig:' .. ARGV[j], '\255d') end
    redis.call('HDEL', key, '\255wait', '\255park')
    out = {DONE, 'signal', r}
  elseif ARGV[9] ~= '' then
    redis.call('HSET', key, name, ARGV[9])
    if ARGV[7] == 'wait' then redis.call('HSET', key, '\255sig:' .. ARGV[10], '\255t') end
    redis.call('HDEL', key, '\255wait', '\255park')
    out = {DONE, 'timeout'}
  else
    redis.call('HSETNX', key, name, ARGV[4])
    local names = {}
    for j = 10, #ARGV do names[#names + 1] = ARGV[j] end
    redis.call('HSET', key, '\255wait', cjson.encode(names))
    out = {DONE, 'wait'}
  end
else
  redis.call('HSET', key, ARGV[3], ARGV[4])
end
keep_for(key, ARGV[5])
if ARGV[6] == '1' then mark_logged(id) end
return out
