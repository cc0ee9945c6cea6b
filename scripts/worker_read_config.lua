-- worker_read_config: read a worker's gen and config together, so that the
-- config read is the one of the gen read.
-- KEYS[1]  wkr:<type>:<id>:config  string: JSON object
-- KEYS[2]  wkr:<type>:<id>:gen     string: integer as ASCII
-- returns  {gen or false, config or false}
local err = wrong_types('string')
if err then return err end
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
