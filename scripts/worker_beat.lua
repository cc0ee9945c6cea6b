-- worker_beat: one heartbeat of a registered worker: its state and
-- last_seen (unix seconds, from the server's clock) in :state, and its
-- stats frame in :stats. When the worker's hardware key is gone, Redis lost
-- the registration (a restart without persistence, a flush): nothing is
-- written and the worker registers again (worker_register.lua).
-- No TYPE checks: HSET, the first write, refuses a wrong-type :state; SET
-- replaces whatever :stats holds.
-- KEYS[1]  wkr:<type>:<id>:hardware  string: JSON
-- KEYS[2]  wkr:<type>:<id>:state     hash: state, last_seen, last_error
-- KEYS[3]  wkr:<type>:<id>:stats     string: JSON
-- ARGV[1]  the state to record (IDLE, RUNNING or ERROR)
-- ARGV[2]  the stats frame, JSON
-- returns  1 when written; 0 when the registration is gone
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], 'state', ARGV[1], 'last_seen', string.format('%d', math.floor(now_us() / 1000000)))
redis.call('SET', KEYS[3], ARGV[2])
return 1
