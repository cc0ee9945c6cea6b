-- worker_read_config: read a worker's gen and config together, so that the
-- config read is the one of the gen read.
-- KEYS[1]  wkr:<type>:<id>:config  string: JSON object
-- KEYS[2]  wkr:<type>:<id>:gen     string: integer as ASCII
-- returns  {gen or false, config or false}
for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k).ok
  if t ~= 'none' and t ~= 'string' then
    return redis.error_reply('WRONGTYPE ' .. k .. ' holds a ' .. t .. ', not a string')
  end
end
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
