-- flow_cancel: the flow's side of a cancel (docs/FLOWS.md, "Cancel of a
-- flow"): 'begin' sets it 'canceling' (no task can be added, and it does
-- not complete until the walk ends); 'page' lists a page of its pending
-- members (HSCAN); 'end' sets it 'canceled' and completes it when nothing
-- is pending.
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- ARGV[1]  'begin', 'page' or 'end'
-- ARGV[2]  page: the HSCAN cursor; ARGV[3] page: its COUNT
-- returns  begin: 'ok', 'none' (no such flow, or not committed) or 'done'
--          (finished already); page: {next cursor, refs...}; end:
--          flow_complete's answer
local mode = ARGV[1]
local st = redis.call('HGET', KEYS[1], 'state')
if mode == 'begin' then
  if not st or st == 'new' then return 'none' end
  if st == 'done' then return 'done' end
  if st ~= 'canceled' then redis.call('HSET', KEYS[1], 'state', 'canceling') end
  return 'ok'
elseif mode == 'page' then
  local sc = redis.call('HSCAN', KEYS[2], ARGV[2], 'COUNT', ARGV[3])
  local out = {sc[1]}
  for i = 1, #sc[2], 2 do
    if sc[2][i + 1] == 'p' then out[#out + 1] = sc[2][i] end
  end
  return out
end
if st == 'canceling' then redis.call('HSET', KEYS[1], 'state', 'canceled') end
return flow_complete(KEYS[1], KEYS[2])
