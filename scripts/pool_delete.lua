-- pool_delete: remove an item, its index entries and any claim on it.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[7]  fleet:pool:<name>:claim:<id>
-- KEYS[8]  fleet:pidx:<name>:own:<id>
-- ARGV[3]  item id
-- returns  1 when removed; 0 when there was no such item
local err = wrong_type()
if err then return err end
local raw = redis.call('HGET', P.hash, ARGV[3])
if not raw then return 0 end
drop(ARGV[3], (decode(raw)))
redis.call('DEL', KEYS[7], KEYS[8])
return 1
