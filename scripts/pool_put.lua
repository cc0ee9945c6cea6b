-- pool_put: store a new item, index it as free, and prune expired items.
-- KEYS[1..11], ARGV[1..3]  as in pool_lib.lua (tag index keys built in-script)
-- ARGV[4]  item id (new and random: no claim key can exist for it)
-- ARGV[5]  payload: base64 (std) of its JSON
-- ARGV[6]  tags: a JSON object
-- ARGV[7]  ttl in milliseconds, "0" for none
-- ARGV[8]  most expired items to prune
-- returns  {hlen, known, pruned}: the hash's length, how many entries the
--          indexes know (items and bad entries; they differ when another
--          client wrote the hash), and how many expired items went;
--          a WRONGTYPE error, nothing changed, when KEYS[1] is no hash
local err = wrong_type()
if err then return err end
local ok, t = pcall(cjson.decode, ARGV[6])
if not ok or type(t) ~= 'table' then
  return redis.error_reply('ERR fleet: tags are not a JSON object')
end
if ARGV[3] ~= '' and redis.call('GET', P.fields) ~= ARGV[3] then
  redis.call('SET', P.fields, ARGV[3])
end
local now = now_ms()
local ttl = tonumber(ARGV[7])
local xs = 'null'
if ttl > 0 then
  local xm = now + ttl
  local s, ms = math.floor(xm / 1000), xm % 1000
  if ms == 0 then
    xs = string.format('%d', s)
  else
    xs = (string.gsub(string.format('%d.%03d', s, ms), '0+$', ''))
  end
  redis.call('ZADD', P.exp, xm, ARGV[4])
end
redis.call('HSET', P.hash, ARGV[4], '{"p":"' .. ARGV[5] .. '","t":' .. ARGV[6] .. ',"x":' .. xs .. '}')
redis.call('SADD', P.all, ARGV[4])
set_free(ARGV[4], t)
local pruned = prune(now, tonumber(ARGV[8]))
redis.call('INCR', P.sig)
return {redis.call('HLEN', P.hash), redis.call('SCARD', P.all) + redis.call('SCARD', P.bad), pruned}
