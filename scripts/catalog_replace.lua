-- catalog_replace: replace the whole catalog in one step, so a reader sees
-- the old catalog or the new one, never a mix or an empty one.
-- KEYS[1]  fleet:catalog (hash: automation type -> JSON schemas)
-- ARGV     type, JSON pairs of the new catalog (none clears it)
-- returns  the number of entries written; a WRONGTYPE error, changing
--          nothing, when KEYS[1] is not a hash
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'hash' and t ~= 'none' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('DEL', KEYS[1])
-- HSET in chunks: unpack is bounded by the Lua C stack.
local chunk = 512
for i = 1, #ARGV, chunk do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
end
return #ARGV / 2
