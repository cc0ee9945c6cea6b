-- schedule_put: store a schedule, or replace its definition. A replaced
-- schedule keeps its paused flag, and its last tick unless the given one
-- is later, so that no tick that was handled fires again.
-- KEYS[1]  fleet:queue:<queue>:schedule:<name>       hash: the schedule (optional)
-- KEYS[2]  fleet:queue:<queue>:schedule:<name>:last  string: last tick, unix ms (optional)
-- ARGV[1]  queue name
-- ARGV[2]  spec ("every <ms>" or "cron <spec>")
-- ARGV[3]  payload (JSON)
-- ARGV[4]  missed-tick policy ("skip" or "once")
-- ARGV[5]  grace in milliseconds
-- ARGV[6]  the latest tick at or before now (unix ms; 0 when none)
-- returns  1 when the schedule is new, 0 when it was replaced
local new = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSET', KEYS[1], 'queue', ARGV[1], 'spec', ARGV[2], 'payload', ARGV[3], 'missed', ARGV[4], 'grace_ms', ARGV[5])
redis.call('HSETNX', KEYS[1], 'paused', '0')
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[6]) > last then
  redis.call('SET', KEYS[2], ARGV[6])
end
if new then return 1 end
return 0
