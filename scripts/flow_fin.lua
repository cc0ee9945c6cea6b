-- flow_fin: note that a done flow's callbacks were applied (docs/FLOWS.md,
-- "Batches"): it then expires after its retention.
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- returns  flow_complete's answer
if redis.call('HGET', KEYS[1], 'state') == 'done' then
  redis.call('HDEL', KEYS[1], 'cb')
end
return flow_complete(KEYS[1], KEYS[2])
