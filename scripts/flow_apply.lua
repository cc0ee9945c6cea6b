-- flow_apply: tell waiting tasks of this queue (or shard) that a dependency
-- ended (docs/FLOWS.md, step 3 of an edge): each notification is applied
-- at most once (flow_tell); a task left with no dependency is released, one
-- whose dependency failed under "fail" is dead-lettered and its own end
-- passed on (OUTBOX).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  the error prefix of a task failed by its dependency
--          (ErrDependencyFailed's text)
-- ARGV[2]  the dead letters' bound when no policy is stored (0: none)
-- ARGV[3..] quads: the waiting task's id, the dependency's ref, how it
--          ended ('ok', 'x' failed, 'c' cancelled), its result or error
-- returns  one digit per quad (flow_tell): 0 no-op, 1 told, 2 released,
--          3 failed
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local now = now_ms()
local dead_max = policy({dead_max = tonumber(ARGV[2])}).dead_max
local out = {}
for i = 3, #ARGV, 4 do
  out[#out + 1] = flow_tell(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], now, ARGV[1], dead_max)
end
return table.concat(out)
