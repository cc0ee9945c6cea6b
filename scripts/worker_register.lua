-- worker_register: record a worker: its hardware, its config and gen when
-- it has none yet, and its state with last_seen from the server's clock, in
-- one step. It runs at Start, and again from the heartbeat when the
-- worker's keys are gone (Redis lost its data): then the worker's config
-- and gen in use are the ones stored.
-- KEYS[1]  wkr:<type>:<id>:hardware  string: JSON
-- KEYS[2]  wkr:<type>:<id>:config    string: JSON object
-- KEYS[3]  wkr:<type>:<id>:gen       string: integer as ASCII
-- KEYS[4]  wkr:<type>:<id>:state     hash: state, last_seen, last_error,
--          applied_gen (derived)
-- ARGV[1]  hardware JSON
-- ARGV[2]  the config to store when there is none
-- ARGV[3]  the gen to store when there is none
-- ARGV[4]  the state to record (IDLE, RUNNING or ERROR)
-- ARGV[5]  the gen of the config the worker runs, for applied_gen; "" at
--          Start (the worker writes it once it applied the stored config)
-- returns  {gen, config} as stored after the call
local err = wrong_types({'string', 'string', 'string', 'hash'})
if err then return err end
local gen = redis.call('GET', KEYS[3])
if gen and not string.match(gen, '^%d+$') then
  return redis.error_reply('ERR ' .. KEYS[3] .. ' value is not an integer')
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'NX')
if not gen then
  gen = ARGV[3]
  redis.call('SET', KEYS[3], gen)
end
redis.call('HSET', KEYS[4], 'state', ARGV[4], 'last_seen', string.format('%d', math.floor(now_us() / 1000000)))
redis.call('HSETNX', KEYS[4], 'last_error', '')
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[4], 'applied_gen', ARGV[5])
end
return {gen, redis.call('GET', KEYS[2])}
