-- worker_set_config: store a worker's config and raise its gen, in one step,
-- if the gen allows it. Two modes:
--   'cas'  (UpdateConfig): only when the stored gen still equals ARGV[3];
--          the gen becomes stored + 1. A worker with no gen key was never
--          registered (or was removed): nothing is written.
--   'push' (PushConfig): only when ARGV[3] is above the stored gen; the gen
--          becomes ARGV[3].
-- A missing gen counts as 0 in 'push'.
-- KEYS[1]  wkr:<type>:<id>:config  string: JSON object
-- KEYS[2]  wkr:<type>:<id>:gen     string: integer as ASCII
-- ARGV[1]  the new config JSON
-- ARGV[2]  'cas' or 'push'
-- ARGV[3]  the expected gen (cas) or the new gen (push), a decimal integer
-- returns  {1, new gen} when stored; {0, stored gen} when refused (nothing
--          changes); {-1, 0} in 'cas' when there is no gen key (nothing
--          changes)
local err = wrong_types('string')
if err then return err end
local cur = redis.call('GET', KEYS[2])
if not cur then
  if ARGV[2] == 'cas' then
    return {-1, 0}
  end
  cur = '0'
end
if not string.match(cur, '^%d+$') or not string.match(ARGV[3], '^%d+$') then
  return redis.error_reply('ERR ' .. KEYS[2] .. ' value is not an integer')
end
local n, arg = tonumber(cur), tonumber(ARGV[3])
if ARGV[2] == 'cas' then
  if n ~= arg then
    return {0, cur}
  end
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, redis.call('INCR', KEYS[2])}
end
if arg <= n then
  return {0, cur}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3])
return {1, ARGV[3]}
