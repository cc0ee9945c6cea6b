-- flow_put: make the flow records of tasks that will wait for their
-- dependencies (docs/FLOWS.md, "Submitting", step 2): each in state 'w',
-- uncommitted (k = 0), with its body, its dependencies (d:<ref> = policy)
-- and its dependents (FOUT..id), in WAITING scored with the server's time.
-- Nothing enters the queue: the commit and the mark (flow_mark.lua) do
-- that. A task whose record exists, or whose end is recorded already, is
-- left alone (a record is never made twice for one task).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV     one JSON object per task: {"id", "b": body, "n": how many
--          dependencies, "f": its flow or "", "cb": the batch it is a
--          callback of or "", "at": ready time (unix ms) or "0", "keep":
--          how long its end stays recorded (ms), "d": [[ref, policy], ...],
--          "o": [the refs of its dependents], "k": "1" for a task without a
--          flow and without dependencies (SubmitOptions.Track), which is
--          committed and released at once (its record in state 'q')}; numbers
--          as strings
-- returns  one code per task: 1 made, 2 made and released; left alone: 0
--          (its record is committed, or its end recorded), u (its record
--          is uncommitted: another submit of that id is under way; for a
--          caller-chosen id, SubmitOptions.ID)
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local now = now_ms()
local out = {}
for i = 1, #ARGV do
  local r = cjson.decode(ARGV[i])
  local rec = FLOW .. r.id
  if redis.call('EXISTS', rec, PENDING .. ':result:' .. r.id) > 0 then -- made, or ended (flow_gone)
    if redis.call('HGET', rec, 'k') == '0' then out[i] = 'u' else out[i] = '0' end
  else
    local f = {'s', 'w', 'k', '0', 'n', r.n, 't', tostring(now), 'b', r.b, 'keep', r.keep}
    if r.k == '1' then f = {'s', 'q', 'k', '1', 'n', '0', 't', tostring(now), 'keep', r.keep} end
    if r.f ~= '' then f[#f + 1] = 'f'; f[#f + 1] = r.f end
    if r.cb ~= '' then f[#f + 1] = 'cb'; f[#f + 1] = r.cb end
    if r.at ~= '0' then f[#f + 1] = 'at'; f[#f + 1] = r.at end
    for _, d in ipairs(r.d) do
      f[#f + 1] = 'd:' .. d[1]
      f[#f + 1] = d[2]
    end
    redis.call('HSET', rec, unpack(f))
    if #r.o > 0 then redis.call('SADD', FOUT .. r.id, unpack(r.o)) end
    if r.k == '1' then
      local at = tonumber(r.at)
      if at > now then
        redis.call('ZADD', SCHEDULED, secs(at), r.b)
      else
        enqueue(r.b, nil, now, false)
      end
      out[i] = '2'
    else
      redis.call('ZADD', WAITING, now, r.id)
      out[i] = '1'
    end
  end
end
return table.concat(out)
