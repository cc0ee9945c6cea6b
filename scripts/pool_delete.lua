-- pool_delete: remove an item, its index entries and any claim on it.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- KEYS[12] fleet:pool:<name>:claim:<id>
-- KEYS[13] fleet:pidx:<name>:own:<id>
-- ARGV[4]  item id
-- returns  1 when removed; 0 when there was no such item
local err = wrong_type()
if err then return err end
local raw = redis.call('HGET', P.hash, ARGV[4])
if not raw then
  forget(ARGV[4])
  return 0
end
drop(ARGV[4], (decode(raw)))
redis.call('DEL', KEYS[12], KEYS[13])
return 1
