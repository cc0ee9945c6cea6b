-- flow_count: count the ends of members of a flow or batch (docs/FLOWS.md,
-- step 4 of an edge), each once (its member state must be pending 'p'),
-- then complete the flow when it is closed and nothing is pending
-- (flow_complete).
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- ARGV     pairs: a member's ref, how it ended ('ok', 'x', 'c')
-- returns  flow_complete's answer
if redis.call('EXISTS', KEYS[1]) == 0 then return {'none', '', ''} end
if #ARGV > 0 then
  local refs = {}
  for i = 1, #ARGV, 2 do refs[#refs + 1] = ARGV[i] end
  local got = redis.call('HMGET', KEYS[2], unpack(refs))
  local field = {ok = 'ok', x = 'fail', c = 'cancel'}
  local mark = {ok = '+', x = 'x', c = 'c'}
  local set, n, seen = {}, {}, {}
  for j, ref in ipairs(refs) do
    local outcome = ARGV[2 * j]
    if field[outcome] and got[j] == 'p' and not seen[ref] then -- a ref named twice counts once
      seen[ref] = true
      set[#set + 1] = ref
      set[#set + 1] = mark[outcome]
      n[outcome] = (n[outcome] or 0) + 1
    end
  end
  if #set > 0 then redis.call('HSET', KEYS[2], unpack(set)) end
  for outcome, k in pairs(n) do redis.call('HINCRBY', KEYS[1], field[outcome], k) end
end
return flow_complete(KEYS[1], KEYS[2])
