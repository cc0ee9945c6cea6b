-- stream_push: add entries to a bounded stream, then trim it by age and by
-- member count, in one step. Every entry's time is the server's (TIME), as
-- its score; in the envelope form the script builds each member, so the
-- envelope's "ts" is its score too, whatever the pusher's clock says.
-- KEYS[1]  stream:<type> (zset: score = unix seconds, member = JSON)
-- ARGV[1]  the most members to keep; "0" keeps any number
-- ARGV[2]  the most age to keep, in milliseconds: members scored more than
--          this before the server's now go; "0" keeps any age
-- ARGV[3]  "0": bare members (the documented form), "1": envelopes
-- ARGV[4..] bare: one data per entry, the member as it is, scored the
--          server's now in microseconds plus one microsecond per entry before
--          it in this call, so the call's members keep their order (as
--          time.time() per push would). Envelopes: id, data pairs, each the
--          member {"id":"<id>","ts":<now>,"data":<data>} scored <now> (ms
--          precision; the ids keep the order); id is [0-9a-f-] only and data
--          is JSON, so the text needs no escaping
-- returns  {length after trimming, now as stored (unix seconds, ms precision,
--          no trailing zeros)}; a WRONGTYPE error, changing nothing, when
--          KEYS[1] is not a sorted set (no TYPE check: the first ZADD, the
--          first write, refuses it)
-- short_secs spells ms (unix milliseconds, >= 0) as seconds the way Go's
-- strconv.FormatFloat(x, 'f', -1, 64) does: 1733130000.12, 1733130000.
local function short_secs(ms)
  local s = string.format('%d.%03d', math.floor(ms / 1000), ms % 1000)
  return (string.gsub(string.gsub(s, '0+$', ''), '%.$', ''))
end
local us = now_us()
local now = math.floor(us / 1000)
local ts = short_secs(now)
-- ZADD in chunks: unpack is bounded by the Lua C stack.
local chunk, args = 512, {}
local wrap = ARGV[3] == '1'
local step = wrap and 2 or 1
for i = 4, #ARGV, step do
  if wrap then
    args[#args + 1] = ts
    args[#args + 1] = '{"id":"' .. ARGV[i] .. '","ts":' .. ts .. ',"data":' .. ARGV[i + 1] .. '}'
  else
    args[#args + 1] = string.format('%d.%06d', math.floor(us / 1000000), us % 1000000)
    args[#args + 1] = ARGV[i]
    us = us + 1
  end
  if #args >= 2 * chunk or i + step > #ARGV then
    redis.call('ZADD', KEYS[1], unpack(args))
    args = {}
  end
end
local age = tonumber(ARGV[2])
if age > 0 and now - age > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. short_secs(now - age))
end
local max = tonumber(ARGV[1])
if max > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -max - 1)
end
return {redis.call('ZCARD', KEYS[1]), ts}
