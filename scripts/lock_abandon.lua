-- lock_abandon: undo an acquire whose caller is gone (its ctx ended, or its
-- connection broke, while the script was in flight), whether that script
-- already ran or is still on its way.
-- KEYS[1]  fleet:lock:<name>
-- KEYS[2]  fleet:fence:<name>     (derived, same slot)
-- KEYS[3]  fleet:locktomb:<name>  (derived, same slot)
-- ARGV[1]  the abandoned token
-- ARGV[2]  how long the tombstone holds, in milliseconds; 0 for none (a
--          release whose outcome is unknown)
-- returns  1 when the token held the lock and it was freed, else 0. With a
--          tombstone, the token goes in KEYS[3] (score: server ms until
--          which it holds; expired members are pruned and the key expires
--          with its last member) and an even fence is made odd, which makes
--          lock_acquire read KEYS[3] and give the lock up for that token.
--          Keys of another type are left alone: an acquire fails on them
--          anyway.
local freed = 0
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed = 1
end
local ms = tonumber(ARGV[2])
if ms <= 0 then
  return freed
end
local f = redis.pcall('GET', KEYS[2])
if type(f) == 'string' then
  local n = tonumber(f)
  if n and n % 2 == 0 then
    redis.call('INCRBY', KEYS[2], 1)
  end
end
entomb(KEYS[3], ARGV[1], ms)
return freed
