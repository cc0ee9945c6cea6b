-- flow_resolve: decide the tasks whose submit looks stuck (still
-- uncommitted a grace after their records were made: docs/FLOWS.md, "The
-- abort"): a task that the flow lists was committed (its mark is missing:
-- roll forward); one it does not list is aborted (member 'a'), so that a
-- late commit of its submit is refused.
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- ARGV     the tasks' refs
-- returns  one char per ref: 'k' committed, 'a' aborted, 'g' no such flow
--          (no commit can come: drop the task)
local out = {}
local exists = redis.call('EXISTS', KEYS[1]) == 1
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[2], ARGV[i])
  if v and v ~= 'a' then
    out[i] = 'k'
  elseif not exists then
    out[i] = 'g'
  else
    if not v then
      redis.call('HSET', KEYS[2], ARGV[i], 'a')
      local ttl = redis.call('PTTL', KEYS[1])
      if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end -- it goes with the record
    end
    out[i] = 'a'
  end
end
return table.concat(out)
