-- flow_close: close a batch (Batch.Close): no task can be added any more,
-- and it completes once nothing is pending (flow_complete).
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- returns  {'refused', '', ''} when it was not open (nothing changes:
--          closed twice, done, cancelled); {'none', '', ''} when there is no
--          such batch; else flow_complete's answer
local st = redis.call('HGET', KEYS[1], 'state')
if not st or st == 'new' then return {'none', '', ''} end
if st ~= 'open' then return {'refused', '', ''} end
redis.call('HSET', KEYS[1], 'state', 'closed')
return flow_complete(KEYS[1], KEYS[2])
