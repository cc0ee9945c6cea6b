-- lib_lease: helpers of the lock and semaphore scripts (scripts.go links
-- in the blocks a script calls). Not a script by itself.

-- expire_with_last makes zset key, whose scores are server ms at which its
-- members end, expire when its last member does.
local function expire_with_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last > 0 then
    redis.call('PEXPIREAT', key, last[2])
  end
end

-- entomb records token in the tombstone zset key for ms milliseconds from
-- now (server clock), for an acquire abandoned in flight: a late acquire
-- script of that token then takes nothing. Expired tombstones go, and the
-- key expires with its last one. A key of another type is left alone: an
-- acquire fails on it anyway.
local function entomb(key, token, ms)
  if type(redis.pcall('ZSCORE', key, token)) == 'table' then
    return
  end
  local now = now_ms()
  redis.call('ZADD', key, now + ms, token)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  expire_with_last(key)
end

-- fence_seed is a fence above every fence handed out since the last seed
-- (which rose by 2 per acquisition, as long as acquisitions come less
-- than once per µs): 2 x the server's clock in µs, + 1, and at least above
-- f, and odd.
local function fence_seed(f)
  local seed = now_us() * 2 + 1
  if seed <= f then
    seed = f + 1
    if seed % 2 == 0 then seed = seed + 1 end
  end
  return seed
end
