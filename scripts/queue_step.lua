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
-- A wait (ARGV[7] 'wait') takes the signal ARGV[3] when it was sent (in
-- the same call: no signal is lost between the look and the record), or
-- ends the wait as timed out, or records the wait and names the signal
-- in "\255wait", for Signal (queue_signal.lua) and the task's snooze
-- (queue_end.lua) to see.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the step's name; '' to read them all
-- ARGV[4]  the step's record (JSON), when ARGV[3] is set; a wait's record
--          while it waits, written unless one is
-- ARGV[5]  the steps' lifetime in ms (>= 1), when ARGV[3] is set
-- ARGV[6]  "1": mark the body with "lg"
-- ARGV[7]  '' (a read or a record) or 'wait'
-- ARGV[8]  wait: the signalled record's JSON up to its result, to which
--          the signal's value and '}' are appended
-- ARGV[9]  wait: the timed-out record, once the wait's time passed; else ''
-- returns  {DONE, name, record, name, record, ...} (a read: every step
--          recorded; a record: none); a wait: {DONE, 'signal', value},
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
if ARGV[7] == 'wait' then
  local name = ARGV[3]
  local sig = '\255sig:' .. name
  local v = redis.call('HGET', key, sig)
  if v and string.byte(v, 1) ~= 255 then
    redis.call('HSET', key, name, ARGV[8] .. v .. '}', sig, '\255d')
    redis.call('HDEL', key, '\255wait', '\255park')
    out = {DONE, 'signal', v}
  elseif ARGV[9] ~= '' then
    redis.call('HSET', key, name, ARGV[9], sig, '\255t')
    redis.call('HDEL', key, '\255wait', '\255park')
    out = {DONE, 'timeout'}
  else
    redis.call('HSETNX', key, name, ARGV[4])
    redis.call('HSET', key, '\255wait', name)
    out = {DONE, 'wait'}
  end
else
  redis.call('HSET', key, ARGV[3], ARGV[4])
end
keep_for(key, ARGV[5])
if ARGV[6] == '1' then mark_logged(id) end
return out
