-- lock_release: delete a lock only if the caller still holds it.
-- KEYS[1]  fleet:lock:<name>
-- ARGV[1]  the caller's token
-- returns  1 when released; 0 when the lock expired or another holds it
--          (then nothing changes); a WRONGTYPE error, nothing changed, when
--          the key holds another type (the GET refuses it)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
