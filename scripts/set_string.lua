-- set_string: SET a string key, refusing to replace a key of another type.
-- KEYS[1]  the key
-- ARGV[1]  the value
-- ARGV[2]  TTL in milliseconds, "0" for none
-- returns  "OK"; a WRONGTYPE error, with the key unchanged, when it holds
--          a hash, list, set or any type but a string
local err = wrong_types('string')
if err then return err end
if ARGV[2] ~= '0' then
  return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1])
