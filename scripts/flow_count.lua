-- flow_count: count the ends of members of a flow or batch (docs/FLOWS.md,
-- step 4 of an edge), each once (its member state must be pending 'p'),
-- then complete the flow when it is closed and nothing is pending
-- (flow_complete).
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- ARGV     pairs: a member's ref, how it ended ('ok', 'x', 'c')
-- returns  flow_complete's answer
if redis.call('EXISTS', KEYS[1]) == 0 then return {'none', '', ''} end
local field = {ok = 'ok', x = 'fail', c = 'cancel'}
local mark = {ok = '+', x = 'x', c = 'c'}
for i = 1, #ARGV, 2 do
  local ref, outcome = ARGV[i], ARGV[i + 1]
  if field[outcome] and redis.call('HGET', KEYS[2], ref) == 'p' then
    redis.call('HSET', KEYS[2], ref, mark[outcome])
    redis.call('HINCRBY', KEYS[1], field[outcome], 1)
  end
end
return flow_complete(KEYS[1], KEYS[2])
