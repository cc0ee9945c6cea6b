-- schedule_fire: handle ticks of a schedule, each at most once whoever
-- calls: a tick is handled only when it is later than the last one
-- handled, and recording it and pushing its task are one atomic step. Any
-- number of schedulers may call it for the same ticks; one submits each.
-- KEYS[1]  fleet:queue:<queue>:schedule:<name>       hash: the schedule (optional)
-- KEYS[2]  fleet:queue:<queue>:schedule:<name>:last  string: last tick, unix ms (optional)
-- KEYS[3]  fleet:queue:<queue>                       list: pending bodies
-- ARGV     pairs, ticks ascending: tick (unix ms), then the task's body, or
--          '' to record the tick as handled without a task (skipped)
-- returns  how many tasks were pushed (a paused schedule records its ticks
--          and pushes none); -1 when there is no such schedule (nothing
--          changes)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local paused = redis.call('HGET', KEYS[1], 'paused') == '1'
local bodies, top = {}, last
for i = 1, #ARGV, 2 do
  local tick = tonumber(ARGV[i])
  if tick > top then
    top = tick
    if ARGV[i + 1] ~= '' and not paused then
      bodies[#bodies + 1] = ARGV[i + 1]
    end
  end
end
if #bodies > 0 then
  redis.call('RPUSH', KEYS[3], unpack(bodies)) -- first: a wrong-type list refuses it
end
if top > last then
  redis.call('SET', KEYS[2], string.format('%d', top))
end
return #bodies
