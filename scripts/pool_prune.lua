-- pool_prune: remove expired items (with their index entries), a bounded
-- number per call: what List does before it reads.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua
-- ARGV[4]  most expired items to prune
-- returns  how many expired items went; a WRONGTYPE error, nothing
--          changed, when KEYS[1] is no hash
local err = wrong_type()
if err then return err end
return prune(now_ms(), tonumber(ARGV[4]))
