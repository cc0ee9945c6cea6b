-- queue_dead_requeue: move dead letters back onto the queue. Each is moved
-- only if it is still in the dead letters (exact match), so two callers
-- never requeue one twice.
-- KEYS[1]  fleet:queue:<name>:dead  list: dead letters
-- KEYS[2]  fleet:queue:<name>       list: pending bodies
-- ARGV     pairs: the dead entry exactly as stored, the body to push
-- returns  how many were moved
local err = wrong_types({'list', 'list'})
if err then return err end
local moved = 0
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    moved = moved + 1
  end
end
return moved
