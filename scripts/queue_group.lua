-- queue_group: set what holds one group of a queue (SubmitOptions.Group)
-- back: its own limits, or its pause. A group blocked by its limit goes
-- back in the round, so that the new limit applies at its next visit; a
-- resumed group goes back in the round when it has tasks.
-- No TYPE checks: each key is read or written by a command that refuses a
-- wrong type before anything changes.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go); the group's
--          keys are derived from PENDING (lib_queue_keys)
-- ARGV[1]  'limit' (its limits are ARGV[3]), 'unlimit' (back to the queue's),
--          'pause' or 'resume'
-- ARGV[2]  the group's name
-- ARGV[3]  limit: the limits as GLIMITS holds them, a JSON object {"c":
--          concurrency, "iv": the rate's emission interval in µs, "b": burst,
--          and the rate as given: "r", "per_ms"}
-- returns  1
local mode, g = ARGV[1], ARGV[2]
local state = redis.call('HGET', GSTATE, g)
if mode == 'limit' then
  redis.call('HSET', GLIMITS, g, ARGV[3])
elseif mode == 'unlimit' then
  redis.call('HDEL', GLIMITS, g)
elseif mode == 'pause' then
  redis.call('SADD', GPAUSED, g)
  return 1 -- a group in the round leaves it at its next visit
else
  redis.call('SREM', GPAUSED, g)
  if state == 'p' then group_unblock(g) end
  return 1
end
if state == 'c' or state == 't' then
  group_unblock(g)
end
return 1
