-- lib_limit: the GCRA (the algorithm of redis-cell and go-redis/redis_rate)
-- of Limiter (limit_allow.lua) and of a queue's groups (group_gate in
-- lib_queue.lua), on the server's clock (scripts.go links in the blocks a
-- script calls). Not a script by itself. A limiter is one string key: its
-- theoretical arrival time (TAT) in server µs, which expires once the
-- limiter is full again, so an idle limiter costs nothing.

-- gcra_tat returns the arrival time that limiter key holds (µs), never
-- before now; nil when the key holds a string that is no number (a
-- WRONGTYPE of another type is raised by the GET).
local function gcra_tat(key, now)
  local v = redis.call('GET', key)
  if not v then return now end
  local tat = tonumber(v)
  if tat and tat < now then tat = now end
  return tat
end

-- gcra_avail returns how many tokens a limiter of emission interval iv and
-- burst burst (tokens at once after a rest) has at now, its arrival time
-- tat.
local function gcra_avail(tat, now, iv, burst)
  local avail = math.floor((now + burst * iv - tat) / iv)
  if avail < 0 then return 0 end
  return avail
end

-- gcra_set stores arrival time tat in limiter key, expiring when the
-- limiter is full again.
local function gcra_set(key, tat, now)
  redis.call('SET', key, string.format('%d', tat), 'PX', math.max(math.ceil((tat - now) / 1000), 1))
end
