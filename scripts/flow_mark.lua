-- flow_mark: mark the records of committed tasks (docs/FLOWS.md,
-- "Submitting", step 5): k = 1, and out of the uncommitted part of WAITING
-- (score +inf). A task with no dependency left is released at once; one
-- whose dependency under "fail" failed before the commit (fx) fails now.
-- A lone task submitted with After (no flow) is committed by this step.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  the error prefix of a task failed by its dependency
-- ARGV[2]  the dead letters' bound when no policy is stored (0: none)
-- ARGV[3..] the tasks' ids
-- returns  one digit per task: 0 no record in 'w' (aborted, or done
--          already), 1 waiting, 2 released, 3 failed
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local now = now_ms()
local dead_max = policy({dead_max = tonumber(ARGV[2])}).dead_max
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local rec = FLOW .. id
  local got = redis.call('HMGET', rec, 's', 'k', 'n', 'fx')
  if got[1] ~= 'w' then
    out[#out + 1] = '0'
  elseif got[2] == '1' then
    out[#out + 1] = '1'
  else
    redis.call('HSET', rec, 'k', '1')
    redis.call('ZADD', WAITING, '+inf', id)
    if got[4] then
      local d = redis.call('HMGET', rec, 'd:' .. got[4], 'e:' .. got[4])
      flow_fail(id, rec, now, got[4], d[2], string.sub(d[1] or 'f', 1, 1) == 's', ARGV[1], dead_max)
      out[#out + 1] = '3'
    elseif tonumber(got[3]) <= 0 then
      flow_release(id, rec, now)
      out[#out + 1] = '2'
    else
      out[#out + 1] = '1'
    end
  end
end
return table.concat(out)
