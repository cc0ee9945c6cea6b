-- queue_log: append one run's log lines (Logger, log.go) to the task's
-- log, if the reservation that exists now is the caller's (owned): a
-- worker whose lease was taken over writes nothing. The log keeps the
-- newest ARGV[4] runs and lives ARGV[5] ms from this write; the end of the
-- task that wrote it deletes it, or gives it the record's lifetime
-- (ack_all, lib_queue.lua), told by the body's "lg" (set here unless an
-- ack follows, so that a release, snooze or dead letter, which keep the
-- body, carries it) or by its attempts.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  task id
-- ARGV[2]  the caller's lease token
-- ARGV[3]  the run's entry: a JSON object, or a sealed value (a JSON
--          string)
-- ARGV[4]  how many runs the log keeps (>= 1)
-- ARGV[5]  the log's lifetime in ms (>= 1)
-- ARGV[6]  "1": mark the body with "lg" (an end other than an ack follows)
-- returns  DONE, or LOST (nothing changes)
local id, token = ARGV[1], ARGV[2]
if not owns(id, token) then return LOST end
local key = TLOG .. id
redis.call('RPUSH', key, ARGV[3])
redis.call('LTRIM', key, -tonumber(ARGV[4]), -1)
redis.call('PEXPIRE', key, ARGV[5])
if ARGV[6] == '1' then mark_logged(id) end
return DONE
