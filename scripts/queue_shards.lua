-- queue_shards: a handle of a sharded queue registers its shard count, or
-- the sweeper lowers the high-water mark (QueueOptions.Shards).
-- KEYS[1]  fleet:queue:<name>:shards  hash: max -> the highest shard count
--          in use; at:<K> -> server ms of the last registration of a
--          handle of K shards (derived)
-- ARGV[1]  'reg' to register, 'state' to read, 'lower' to lower the mark
-- ARGV[2]  reg: the handle's shard count K (1: only read the mark);
--          state, lower: the grace in ms (a count registered within it
--          stays in use)
-- ARGV[3]  lower: the count the caller found every shard past empty (the
--          new mark)
-- returns  reg: the mark after the call (1 when there is none);
--          state: {mark, the highest count in use (1 when none)};
--          lower: the mark after the call (unchanged when a handle of a
--          higher count registered within the grace)
local now = now_ms()
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '1') or 1
if ARGV[1] == 'reg' then
  local k = tonumber(ARGV[2])
  if k <= 1 then
    return max
  end
  if k > max then
    max = k
  end
  redis.call('HSET', KEYS[1], 'max', max, 'at:' .. k, now)
  return max
end
local grace = tonumber(ARGV[2])
local fields = redis.call('HGETALL', KEYS[1])
if ARGV[1] == 'state' then
  local used = 1
  for i = 1, #fields, 2 do
    local k = string.match(fields[i], '^at:(%d+)$')
    if k and tonumber(fields[i + 1]) >= now - grace and tonumber(k) > used then
      used = tonumber(k)
    end
  end
  return {max, used}
end
local to = tonumber(ARGV[3])
if to >= max then
  return max
end
local stale = {}
for i = 1, #fields, 2 do
  local k = string.match(fields[i], '^at:(%d+)$')
  if k then
    k = tonumber(k)
    if tonumber(fields[i + 1]) >= now - grace then
      if k > to then
        return max -- a handle of k shards registered lately: keep them
      end
    else
      stale[#stale + 1] = fields[i]
    end
  end
end
if #stale > 0 then
  redis.call('HDEL', KEYS[1], unpack(stale))
end
if to <= 1 and redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'max', to)
return to
