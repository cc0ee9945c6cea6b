-- flow_unwatch: take refs of tasks whose submit was refused out of the
-- dependents of tasks of this queue (or shard), so that a refused submit
-- leaves nothing behind (docs/FLOWS.md).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV     pairs: the dependency's id, the dependent's ref
-- returns  how many refs went
local n = 0
for i = 1, #ARGV, 2 do
  n = n + redis.call('SREM', FOUT .. ARGV[i], ARGV[i + 1])
end
return n
