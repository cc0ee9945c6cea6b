-- queue_trim: bound the dead letters by count and by age (oldest first).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  most entries kept (0: no bound)
-- ARGV[2]  oldest age kept, in milliseconds (0: no bound); an entry without
--          a numeric "dead_at" (written by another client) stops the age trim
-- ARGV[3]  most entries removed by age in this call
-- returns  how many entries were removed
local t = redis.call('TYPE', DEAD).ok
if t ~= 'none' and t ~= 'list' then
  return redis.error_reply('WRONGTYPE ' .. DEAD .. ' holds a ' .. t .. ', not a list')
end
local removed = 0
local bound = tonumber(ARGV[1])
if bound > 0 then
  local n = redis.call('LLEN', DEAD)
  if n > bound then
    redis.call('LTRIM', DEAD, -bound, -1)
    removed = n - bound
  end
end
local age = tonumber(ARGV[2])
if age > 0 then
  local cutoff = (now_ms() - age) / 1000
  for _ = 1, tonumber(ARGV[3]) do
    local head = redis.call('LINDEX', DEAD, 0)
    if not head then
      break
    end
    local ok, v = pcall(cjson.decode, head)
    if not ok or type(v) ~= 'table' or type(v.dead_at) ~= 'number' or v.dead_at >= cutoff then
      break
    end
    redis.call('LPOP', DEAD)
    removed = removed + 1
  end
end
return removed
