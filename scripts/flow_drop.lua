-- flow_drop: delete the records of tasks whose submit was not committed
-- and never will be (docs/FLOWS.md, "The abort"): only a record still
-- waiting and uncommitted goes, with its dependents' set and its WAITING
-- entry. The dependencies it named outside its flow may still hold its ref
-- among their dependents (flow_unwatch.lua takes them out); a notification
-- to a record that is gone is a no-op. A record that a task from outside
-- its submit waits for (xo: flow_watch.lua) ends as cancelled instead
-- (flow_ended), so that its end is passed on to that task.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  the error of a task cancelled so (its submit was aborted)
-- ARGV[2..] the tasks' ids
-- returns  for each record dropped: its id, the count of its dependencies,
--          and their refs
local out = {}
local ARGV_WHY = ARGV[1]
for i = 2, #ARGV do
  local id = ARGV[i]
  local rec = FLOW .. id
  local got = redis.call('HMGET', rec, 's', 'k', 'xo', 'keep')
  if got[1] == 'w' and got[2] ~= '1' then
    local refs = {}
    for _, f in ipairs(redis.call('HKEYS', rec)) do
      if string.sub(f, 1, 2) == 'd:' then refs[#refs + 1] = string.sub(f, 3) end
    end
    if got[3] then
      flow_ended(id, 't' .. (got[4] or '1'), 'c', ARGV_WHY)
    else
      redis.call('DEL', rec, FOUT .. id)
      redis.call('ZREM', WAITING, id)
    end
    out[#out + 1] = id
    out[#out + 1] = tostring(#refs)
    for _, r in ipairs(refs) do out[#out + 1] = r end
  end
end
return out
