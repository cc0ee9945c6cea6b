-- sync_queue_walk: one bounded step of Sync's walk over a queue's live
-- tasks (scheduled, pending, prioritized, of a group, in flight), to
-- rebuild :dedup. For each body
-- that carries a dedup key, a missing entry for the key is added (pointing
-- at this task, which is live at this instant), and the key and the task's
-- id are returned: Sync compares them with the entries it saw before the
-- walk, and removes or re-points only the entries that no live task
-- confirmed (sync_queue_drop.lua).
-- Regions, one per call:
--  - 'sched': ZSCAN of :scheduled from a cursor;
--  - 'prio': ZSCAN of :prio (the prioritized tasks) from a cursor;
--  - 'proc': HSCAN of :processing:body from a cursor;
--  - 'pending', 'group': the documented list, or one group's list, read
--    in windows from the tail toward the head by
--    offset from the tail. Pushes at the tail only make a window read again
--    what it read (an offset from the tail never skips an element that
--    stays), and pops and pushes at the head do not move it. A pass ends at
--    the head; the next pass reads from the new tail back to the element
--    that was the tail when the last pass began (the marker), to see what
--    was pushed meanwhile. The walk is done when a pass finds its marker in
--    its first window: at that instant every element in the list was seen.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  'sched', 'prio', 'proc', 'pending' or 'group'
-- ARGV[2]  how many elements to read at most
-- ARGV[3]  sched, prio, proc: the scan cursor ('0' to start)
--          pending, group: the offset from the tail already read in this pass
-- ARGV[4]  pending, group: the marker of this pass ('' in the first)
-- ARGV[5]  pending, group: the tail when this pass began ('' at a pass's start)
-- ARGV[6]  group: the group's name
-- returns  {done ('1' or '0'), ARGV[3..5] for the next step, added,
--           key1, id1, key2, id2, ...}
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local out = {'0', '0', '', '', 0}
local function note(body)
  if not string.find(body, '"dedup"', 1, true) then return end
  local ok, v = pcall(cjson.decode, body)
  if not ok or type(v) ~= 'table' or type(v.dedup) ~= 'string' or v.dedup == '' or type(v.id) ~= 'string' or v.id == '' then
    return
  end
  if not redis.call('HGET', DEDUP, v.dedup) then
    redis.call('HSET', DEDUP, v.dedup, v.id)
    out[5] = out[5] + 1
  end
  out[#out + 1] = v.dedup
  out[#out + 1] = v.id
end
local n = tonumber(ARGV[2])
if ARGV[1] == 'sched' or ARGV[1] == 'prio' or ARGV[1] == 'proc' then
  local r
  if ARGV[1] ~= 'proc' then
    r = redis.call('ZSCAN', ARGV[1] == 'sched' and SCHEDULED or PRIO, ARGV[3], 'COUNT', n)
    for i = 1, #r[2], 2 do note(r[2][i]) end
  else
    r = redis.call('HSCAN', BODY, ARGV[3], 'COUNT', n)
    for i = 2, #r[2], 2 do note(r[2][i]) end
  end
  out[2] = r[1]
  if r[1] == '0' then out[1] = '1' end
  return out
end
local list = PENDING
if ARGV[1] == 'group' then list = GROUP .. ARGV[6] end
local off, marker, began = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local first = off == 0
if first then
  began = redis.call('LINDEX', list, -1)
  if not began or began == marker then
    out[1] = '1'
    return out
  end
end
local win = redis.call('LRANGE', list, -(off + n), -(off + 1))
local found = false
for i = #win, 1, -1 do
  if marker ~= '' and win[i] == marker then
    found = true
    break
  end
  note(win[i])
end
if found and first then
  out[1] = '1'
elseif found or #win < n then
  out[2], out[3], out[4] = '0', began, '' -- the next pass
else
  out[2], out[3], out[4] = tostring(off + #win), marker, began
end
return out
