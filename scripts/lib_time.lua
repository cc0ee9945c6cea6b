-- lib_time: the server's clock, for every script that reads it (scripts.go
-- links in the blocks a script calls). Not a script by itself.

-- now_us returns the server's clock in unix microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now_ms returns the server's clock in unix milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- secs spells unix milliseconds as the seconds of a score or a dead_at.
local function secs(ms)
  return string.format('%.3f', ms / 1000)
end
