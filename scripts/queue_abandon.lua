-- queue_abandon: hand back what a reserve call took when its caller gave up
-- while the script was in flight (its ctx ended, or its connection broke):
-- each task that the call reserved, and that is still reserved under the
-- call's tokens, goes back unchanged to the head of the queue, without
-- counting an attempt; one that Queue.Cancel flagged meanwhile (canceled)
-- stays reserved, for the sweeper to bury as cancelled once its lease runs
-- out. When the call's script has not run yet, a tombstone in its place
-- makes it take nothing when it does.
-- KEYS[1]  fleet:queue:<name>                   list: pending bodies
-- KEYS[2]  fleet:queue:<name>:processing        zset: id -> deadline
-- KEYS[3]  fleet:queue:<name>:processing:body   hash: id -> body
-- KEYS[4]  fleet:queue:<name>:processing:lease  hash: id -> "token deadline_ms[ c]" (derived)
-- KEYS[5]  fleet:queue:<name>:call:<prefix>     string: the call's tombstone (derived)
-- ARGV[1]  the call's token prefix
-- ARGV[2]  how long the tombstone lives, in milliseconds
-- returns  how many tasks went back; -1 when the call had not run (tombstoned)
local err = wrong_types({'list', 'zset', 'hash', 'hash'})
if err then return err end
local rec = redis.call('HGET', KEYS[4], record(ARGV[1]))
if not rec then
  -- Not run yet, or run and already ended (its tasks acked): either way a
  -- tombstone is right.
  redis.call('SET', KEYS[5], '', 'PX', ARGV[2])
  return -1
end
redis.call('HDEL', KEYS[4], record(ARGV[1]))
local back = 0
local ok, ids = pcall(cjson.decode, rec)
if not ok or type(ids) ~= 'table' then ids = {} end
for i = #ids, 1, -1 do -- back to the head in their order
  local id = ids[i]
  local v = redis.call('HGET', KEYS[4], id)
  local tok = v and string.match(v, '^(%S+)')
  if tok and string.sub(tok, 1, #ARGV[1]) == ARGV[1] and not canceled(v) and owns(KEYS[2], KEYS[4], id, tok) then
    local body = redis.call('HGET', KEYS[3], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    if body then
      redis.call('LPUSH', KEYS[1], body)
      back = back + 1
    end
  end
end
return back
