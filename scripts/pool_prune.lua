-- pool_prune: remove expired items (with their claims and index entries),
-- a bounded number per call: what List does before it reads.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua
-- ARGV[3]  most expired items to prune
-- returns  how many expired items went; a WRONGTYPE error, nothing
--          changed, when KEYS[1] is no hash
local err = wrong_type()
if err then return err end
return prune(now_ms(), tonumber(ARGV[3]))
