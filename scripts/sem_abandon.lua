-- sem_abandon: undo an acquire (or a release) whose caller is gone (its
-- ctx ended, or its connection broke, while the script was in flight),
-- whether that script already ran or is still on its way.
-- KEYS[1]  fleet:sem:<name>
-- KEYS[2]  fleet:semtomb:<name>  (same slot)
-- ARGV[1]  the abandoned token
-- ARGV[2]  how long the tombstone holds, in milliseconds; 0 for none (a
--          release whose outcome is unknown)
-- returns  1 when the token held a permit and it was freed, else 0. With a
--          tombstone, the token goes in KEYS[2] (score: server ms until
--          which it holds; expired members are pruned and the key expires
--          with its last member), which makes a late sem_acquire of that
--          token take nothing. Keys of another type are left alone: an
--          acquire fails on them anyway.
local freed = 0
local d = redis.pcall('ZREM', KEYS[1], ARGV[1])
if d == 1 then
  freed = 1
end
local ms = tonumber(ARGV[2])
if ms <= 0 then
  return freed
end
entomb(KEYS[2], ARGV[1], ms)
return freed
