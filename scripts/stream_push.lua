-- stream_push: add entries to a bounded stream, then trim it by age and by
-- member count, in one step.
-- KEYS[1]  stream:<type> (zset: score = unix seconds, member = JSON envelope)
-- ARGV[1]  the most members to keep; "0" keeps any number
-- ARGV[2]  the age cutoff: members scored below it go, as an exclusive
--          ZREMRANGEBYSCORE bound such as "(1733126400.123"; "" keeps any age
-- ARGV[3..] score, member pairs to add
-- returns  the stream's length after trimming; a WRONGTYPE error, changing
--          nothing, when KEYS[1] is not a sorted set
local err = wrong_types('zset')
if err then return err end
-- ZADD in chunks: unpack is bounded by the Lua C stack.
local chunk = 512
for i = 3, #ARGV, chunk do
  redis.call('ZADD', KEYS[1], unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
end
if ARGV[2] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
end
local max = tonumber(ARGV[1])
if max > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -max - 1)
end
return redis.call('ZCARD', KEYS[1])
