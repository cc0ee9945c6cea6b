-- flow_ops: the registry of flows with an operation under way (fleet:
-- flows: a Close that completes a batch, a cancel's walk; docs/FLOWS.md),
-- scored with the server's clock, so that a sweeper finishes one that a
-- crash stopped.
-- KEYS[1]  fleet:flows    zset: flow id -> server ms
-- ARGV[1]  'add' (ARGV[2] the flow id), 'rem' (ARGV[2] the flow id), or
--          'due' (ARGV[2] an age in ms, ARGV[3] how many at most)
-- returns  add, rem: 1; due: the ids of the entries older than the age
local mode = ARGV[1]
if mode == 'add' then
  redis.call('ZADD', KEYS[1], now_ms(), ARGV[2])
  return 1
elseif mode == 'rem' then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 1
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms() - tonumber(ARGV[2]), 'LIMIT', 0, tonumber(ARGV[3]))
