-- flow_out: read what is to be passed on of tracked tasks that ended
-- (docs/FLOWS.md, step 2 of an edge): each one's outcome, its result or
-- error, its flow, and a page of its dependents (SSCAN of FOUT..id).
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1]  the page size of the dependents
-- ARGV[2..] pairs: a task id, the SSCAN cursor of its dependents ('0' to
--          begin)
-- returns  per pair: {id, state, result or error, flow or '', next cursor,
--          count of refs, refs...} flattened; state is the record's ('ok',
--          'x', 'c'), or '-' when the record is gone or not ended (the
--          entry is stale: it only needs removing)
local out = {}
local page = ARGV[1]
for i = 2, #ARGV, 2 do
  local id, cursor = ARGV[i], ARGV[i + 1]
  local got = redis.call('HMGET', FLOW .. id, 's', 'res', 'err', 'f')
  local s = got[1]
  if s ~= 'ok' and s ~= 'x' and s ~= 'c' then
    out[#out + 1] = id
    out[#out + 1] = '-'
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = '0'
    out[#out + 1] = '0'
  else
    local sc = redis.call('SSCAN', FOUT .. id, cursor, 'COUNT', page)
    out[#out + 1] = id
    out[#out + 1] = s
    if s == 'ok' then out[#out + 1] = got[2] or 'null' else out[#out + 1] = got[3] or '' end
    out[#out + 1] = got[4] or ''
    out[#out + 1] = sc[1]
    out[#out + 1] = tostring(#sc[2])
    for _, r in ipairs(sc[2]) do out[#out + 1] = r end
  end
end
return out
