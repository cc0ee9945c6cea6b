-- schedule_pause: pause or resume a schedule that exists.
-- KEYS[1]  fleet:queue:<queue>:schedule:<name>  hash: the schedule (optional)
-- ARGV[1]  '1' to pause, '0' to resume
-- returns  1 when set, 0 when there is no such schedule (nothing changes)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
return 1
