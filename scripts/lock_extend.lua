-- lock_extend: push a held lock's expiry to hold from now.
-- KEYS[1]  fleet:lock:<name>
-- ARGV[1]  the caller's token
-- ARGV[2]  the new hold in milliseconds
-- returns  1 when extended; 0 when the lock expired or another holds it
--          (then nothing changes); a WRONGTYPE error, nothing changed, when
--          the key holds another type (the GET refuses it)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
