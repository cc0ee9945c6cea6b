-- flow_out_done: end what flow_out began, once every dependent was told
-- and the flow counted (docs/FLOWS.md, step 5 of an edge): the tasks leave
-- OUTBOX, and the records of those that ended go with their dependents'
-- sets (their end stays in :result:<id>).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV     the tasks' ids
-- returns  how many left OUTBOX
local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  n = n + redis.call('ZREM', OUTBOX, id)
  local s = redis.call('HGET', FLOW .. id, 's')
  if s == 'ok' or s == 'x' or s == 'c' then
    redis.call('DEL', FLOW .. id, FOUT .. id)
  end
end
return n
