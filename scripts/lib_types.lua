-- lib_types: the key type check of scripts that write several keys
-- (scripts.go links it into a script that calls it). Not a script by
-- itself.
--
-- wrong_types(want) returns a WRONGTYPE error reply when a key of KEYS holds
-- another type than want says for it, else nil. want is a list (want[i] is
-- KEYS[i]'s type; nil skips that key) or one type for every key. A missing
-- key ('none') is always fine. Scripts call it before their first write,
-- so that a wrong-type key changes nothing.
local function wrong_types(want)
  for i, k in ipairs(KEYS) do
    local w = want
    if type(want) == 'table' then w = want[i] end
    if w then
      local t = redis.call('TYPE', k).ok
      if t ~= 'none' and t ~= w then
        return redis.error_reply('WRONGTYPE ' .. k .. ' holds a ' .. t .. ', not a ' .. w)
      end
    end
  end
  return nil
end
