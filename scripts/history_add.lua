-- history_add: add one process's counts of a queue's task ends to the
-- queue's history, and a sample of its depth (history.go; docs/SCHEMA.md).
-- Both keys are the queue's (shard 0's), so they share its slot.
-- KEYS[1]  fleet:queue:<name>:hist:m:<hour>  hash: "<minute>:<c>" -> n
-- KEYS[2]  fleet:queue:<name>:hist:d:<day>   hash: "<c>" -> n
--          where <c> is d (done), r (retried), x (dead-lettered), or n
--          (the depth: the minute's sample, the day's peak)
-- ARGV[1]  the minute within the hour, 0..59
-- ARGV[2]  tasks done to add (>= 0)
-- ARGV[3]  tasks retried to add (>= 0)
-- ARGV[4]  tasks dead-lettered to add (>= 0)
-- ARGV[5]  the depth sampled (>= 0), or '' for none
-- ARGV[6]  unix s at which KEYS[1] expires; ARGV[7] at which KEYS[2] does
-- ARGV[8]  the sending Fleet's field in KEYS[2], "s:<random>"
-- ARGV[9]  the batch's sequence number, rising per Fleet: a batch sent
--          again after its reply was lost is added once
-- returns  1 when added, 0 when the batch was added before. A key of
--          another type is refused (WRONGTYPE) before any write.
for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t .. ', not a hash')
  end
end
local seen = tonumber(redis.call('HGET', KEYS[2], ARGV[8]))
if seen and seen >= tonumber(ARGV[9]) then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[8], ARGV[9])
local m = ARGV[1] .. ':'
for i, c in ipairs({'d', 'r', 'x'}) do
  local n = tonumber(ARGV[i + 1])
  if n > 0 then
    redis.call('HINCRBY', KEYS[1], m .. c, n)
    redis.call('HINCRBY', KEYS[2], c, n)
  end
end
if ARGV[5] ~= '' then
  local n = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], m .. 'n', n)
  local peak = tonumber(redis.call('HGET', KEYS[2], 'n'))
  if not peak or n > peak then
    redis.call('HSET', KEYS[2], 'n', n)
  end
end
redis.call('EXPIREAT', KEYS[1], ARGV[6])
redis.call('EXPIREAT', KEYS[2], ARGV[7])
return 1
