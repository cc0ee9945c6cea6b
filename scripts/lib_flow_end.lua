-- lib_flow_end: the hook by which every end of a task passes on the end of
-- a tracked one (docs/FLOWS.md). Not a script by itself; scripts.go links
-- its block into the scripts that end tasks (ack_all, queue_end,
-- queue_requeue, queue_cancel) and into the flow scripts. It builds its keys
-- from PENDING only when the task is tracked, so that an end of a plain
-- task builds none.

-- flow_ended passes on the end of task id in the script that ends it.
-- flags is what the end step knows of the task: '' nothing to do; 'p' it
-- set a progress value (the entry goes); 't<ms>' it is tracked, its end
-- recorded for ms (both may be given: 'pt<ms>'). outcome is 'ok'
-- (acked), 'x' (dead-lettered) or 'c' (cancelled), or nil for a step that
-- does not end the task (a retry, a release, a snooze: only its progress
-- goes); detail is its result (JSON) or its error. A tracked task's flow
-- record, while waiting ('w') or queued ('q'), takes the outcome, and the
-- task goes into the outbox when it has dependents or a flow to tell (else
-- the record goes at once). The end record (:result:<id>) of a task that
-- did not succeed is written here, for ms; an ack writes its own.
local function flow_ended(id, flags, outcome, detail, attempts)
  if flags == '' then return end
  local p, ms = string.match(flags, '^(p?)t?(%d*)$')
  if p == 'p' then redis.call('HDEL', PENDING .. ':progress', id) end
  if not outcome or not ms or ms == '' then return end
  local rec = PENDING .. ':flow:' .. id
  local now = now_ms()
  local got = redis.call('HMGET', rec, 's', 'f')
  if got[1] == 'q' or got[1] == 'w' then
    if got[1] == 'w' then
      redis.call('ZREM', PENDING .. ':waiting', id)
      redis.call('HDEL', rec, 'b')
    end
    if got[2] or redis.call('EXISTS', PENDING .. ':fout:' .. id) == 1 then
      redis.call('HSET', rec, 's', outcome, outcome == 'ok' and 'res' or 'err', detail)
      redis.call('ZADD', PENDING .. ':outbox', now, id)
    else
      redis.call('DEL', rec)
    end
  end
  if outcome ~= 'ok' and tonumber(ms) > 0 then
    local status = 'dead'
    if outcome == 'c' then status = 'canceled' end
    redis.call('SET', PENDING .. ':result:' .. id, '{"id":' .. cjson.encode(id) .. ',"status":"' .. status ..
      '","error":' .. cjson.encode(detail or '') .. ',"attempts":' .. (attempts or 0) .. ',"done_at":' .. secs(now) .. '}',
      'PX', ms)
  end
end

-- flow_flags returns the flags of flow_ended for a body as stored (v, its
-- decoding, or nil to decode it): 't<ms>' for a tracked task, else ''.
local function flow_flags(body, v)
  if v == nil then
    if not string.find(body, '"track":', 1, true) then return '' end
    local ok, d = pcall(cjson.decode, body)
    if not ok or type(d) ~= 'table' then return '' end
    v = d
  end
  local ms = tonumber(v.track)
  if ms and ms > 0 then return 't' .. string.format('%d', ms) end
  return ''
end
