-- flow_commit: the commit point of a submit (docs/FLOWS.md, "Submitting",
-- step 4): every task of the submit becomes a pending member of the flow
-- (its callbacks, a batch's, members marked 'k'), all or none. A flow's
-- submit ('flow') and a batch's making ('batch') need the record in state
-- 'new' (made by flow_new.lua, an hour ago at most), which then loses its
-- time to live and becomes 'closed' (a flow) or 'open' (a batch); an Add
-- ('add') needs the batch 'open'. A task that the sweeper aborted (member
-- 'a': its submitter looked dead) refuses the whole commit. A repeat of a
-- commit that happened answers 'ok' and changes nothing.
-- KEYS[1]  fleet:flow:<id>    hash: the record
-- KEYS[2]  fleet:flow:<id>:m  hash: the members
-- ARGV[1]  'flow', 'batch' or 'add'
-- ARGV[2]  how many callback refs follow (c)
-- ARGV[3..2+c] the callbacks' refs; ARGV[3+c..] the members' refs
-- returns  'ok'; 'gone' (no record, or not in the state the mode needs);
--          'closed' (an add to a batch that is not open); 'aborted'
local mode = ARGV[1]
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return 'gone' end
local c = tonumber(ARGV[2])
local refs = {}
for i = 3 + c, #ARGV do refs[#refs + 1] = ARGV[i] end
local fresh = #refs
if #refs > 0 then
  local got = redis.call('HMGET', KEYS[2], unpack(refs))
  fresh = 0
  for j = 1, #refs do
    if got[j] == 'a' then return 'aborted' end
    if not got[j] then fresh = fresh + 1 end
  end
  if fresh == 0 and st ~= 'new' then return 'ok' end -- a repeat
end
if mode == 'add' then
  if st ~= 'open' then
    if st == 'new' then return 'gone' end
    return 'closed'
  end
elseif st ~= 'new' then
  return 'gone'
end
if #refs > 0 then
  local m = {}
  for _, r in ipairs(refs) do m[#m + 1] = r; m[#m + 1] = 'p' end
  redis.call('HSET', KEYS[2], unpack(m))
  redis.call('HINCRBY', KEYS[1], 'total', #refs)
end
if c > 0 then
  local m = {}
  for i = 3, 2 + c do m[#m + 1] = ARGV[i]; m[#m + 1] = 'k' end
  redis.call('HSET', KEYS[2], unpack(m))
end
if mode == 'flow' then
  redis.call('HSET', KEYS[1], 'state', 'closed')
  redis.call('PERSIST', KEYS[1])
elseif mode == 'batch' then
  redis.call('HSET', KEYS[1], 'state', 'open')
  redis.call('PERSIST', KEYS[1])
end
return 'ok'
