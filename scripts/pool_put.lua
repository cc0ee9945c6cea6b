-- pool_put: store a new item, index it, and prune expired items.
-- KEYS[1..6], ARGV[1..2]  as in pool_lib.lua (tag index keys built in-script)
-- ARGV[3]  item id
-- ARGV[4]  payload: base64 (std) of its JSON
-- ARGV[5]  tags: a JSON object
-- ARGV[6]  ttl in milliseconds, "0" for none
-- ARGV[7]  most expired items to prune
-- returns  {hlen, indexed, pruned}: the hash's length and the all-set's
--          size after the put (they differ when the hash holds entries
--          that are not indexed), and how many expired items went;
--          a WRONGTYPE error, nothing changed, when KEYS[1] is no hash
local err = wrong_type()
if err then return err end
local ok, t = pcall(cjson.decode, ARGV[5])
if not ok or type(t) ~= 'table' then
  return redis.error_reply('ERR fleet: tags are not a JSON object')
end
local now = now_ms()
local ttl = tonumber(ARGV[6])
local xs, x = 'null', false
if ttl > 0 then
  local xm = now + ttl
  local s, ms = math.floor(xm / 1000), xm % 1000
  if ms == 0 then
    xs = string.format('%d', s)
  else
    xs = (string.gsub(string.format('%d.%03d', s, ms), '0+$', ''))
  end
  x = xm / 1000
end
redis.call('HSET', P.hash, ARGV[3], '{"p":"' .. ARGV[4] .. '","t":' .. ARGV[5] .. ',"x":' .. xs .. '}')
index(ARGV[3], t, x)
local pruned = prune(now, tonumber(ARGV[7]))
redis.call('INCR', P.sig)
return {redis.call('HLEN', P.hash), redis.call('SCARD', P.all), pruned}
