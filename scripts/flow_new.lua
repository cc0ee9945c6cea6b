-- flow_new: open a flow or a batch (docs/FLOWS.md, "Submitting", step 1):
-- its record in state 'new', which lives an hour unless a commit
-- (flow_commit.lua) keeps it. A commit needs it: a submit that never
-- commits leaves nothing once the hour is over (the sweeper drops its
-- tasks' records).
-- KEYS[1]  fleet:flow:<id>    hash: the flow's record
-- ARGV[1]  'flow' or 'batch'
-- ARGV[2]  its retention once done (ms)
-- ARGV[3]  its callbacks (a batch's) as JSON [[ref, 'success'|'complete'], ...], or ''
-- ARGV[4]  the record's time to live until the commit (ms)
-- returns  {'made'}, or {'exists', kind, state, age in ms} when a flow or
--          batch of that id exists already (a caller-chosen id:
--          FlowOptions.ID, BatchOptions.ID); nothing changes then
local got = redis.call('HMGET', KEYS[1], 'kind', 'state', 'at')
if got[2] then return {'exists', got[1] or '', got[2], tostring(now_ms() - (tonumber(got[3]) or 0))} end
local f = {'state', 'new', 'kind', ARGV[1], 'at', tostring(now_ms()), 'total', '0', 'ok', '0', 'fail', '0', 'cancel', '0', 'keep', ARGV[2]}
if ARGV[3] ~= '' then f[#f + 1] = 'cb'; f[#f + 1] = ARGV[3] end
redis.call('HSET', KEYS[1], unpack(f))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {'made'}
