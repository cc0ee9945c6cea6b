-- flow_forget: delete the record of a flow (or batch) whose submit was
-- refused before its commit: only while it is in state 'new' (docs/
-- FLOWS.md, "The abort"); a record left lives an hour at most.
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- returns  1 deleted, 0 not (none, or committed)
if redis.call('HGET', KEYS[1], 'state') ~= 'new' then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
