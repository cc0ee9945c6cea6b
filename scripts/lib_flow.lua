-- lib_flow: the steps of the flow scripts in a queue's slot (docs/FLOWS.md;
-- scripts.go links in the blocks a script calls). Not a script by itself.
-- A tracked task's flow record is FLOW..id (hash), its dependents FOUT..id
-- (set of refs); OUTBOX and WAITING are the queue's (lib_queue_keys).

-- flow_release moves waiting task id (rec its record: committed, no
-- dependency left) to where reserves take it: its queue, as enqueue routes
-- it, or SCHEDULED when its ready time ("at", unix ms) is ahead. Its state
-- goes from 'w' to 'q' in the same step: the one release.
local function flow_release(id, rec, now)
  local got = redis.call('HMGET', rec, 'b', 'at')
  local body = got[1]
  if not body then return false end
  local at = tonumber(got[2])
  if at and at > now then
    redis.call('ZADD', SCHEDULED, secs(at), body)
  else
    enqueue(body, nil, now, false)
  end
  redis.call('HSET', rec, 's', 'q')
  redis.call('HDEL', rec, 'b')
  redis.call('ZREM', WAITING, id)
  return true
end

-- flow_fail ends waiting task id (rec its record, committed) because its
-- dependency ref failed or was cancelled (detail: its error): under the
-- "fail" policy (skip false) the task goes to the dead letters, with the
-- error why (ErrDependencyFailed's text) .. ': ' .. ref .. ': ' .. detail,
-- bounded to dead_max; under "skip" (a batch's success callback) it is
-- dropped, its end recorded as cancelled. Either way its end is passed on.
local function flow_fail(id, rec, now, ref, detail, skip, why, dead_max)
  local got = redis.call('HMGET', rec, 'b', 'keep')
  local body, keep = got[1], got[2] or '0'
  local msg = why .. ': ' .. ref .. ': ' .. (detail or '')
  if skip then
    flow_ended(id, 't' .. keep, 'c', msg, 0)
    return
  end
  if body and string.sub(body, -1) == '}' then
    bury(string.sub(body, 1, -2) .. ',"error":' .. cjson.encode(msg) .. '}', now, dead_max)
  end
  flow_ended(id, 't' .. keep, 'x', msg, 0)
end

-- flow_tell tells waiting task id that its dependency ref ended with
-- outcome ('ok', 'x' failed, 'c' cancelled; detail its result or error).
-- It changes nothing unless the task's record is waiting ('w') and the
-- dependency is one of its own not yet told (d:<ref> holds its policy
-- alone): so a repeat, a late notification, or one for a task released,
-- failed or gone is a no-op. Else it records the outcome, and, once the
-- task is committed (k = 1), releases it when no dependency is left, or
-- fails it when a dependency under "fail" (or "skip") failed; before the
-- commit, such a failure is noted (fx) for the mark. It returns 0 no-op,
-- 1 told (still waiting), 2 released, 3 failed.
local function flow_tell(id, ref, outcome, detail, now, why, dead_max)
  local rec = FLOW .. id
  local got = redis.call('HMGET', rec, 's', 'k', 'd:' .. ref)
  local pol = got[3]
  if got[1] ~= 'w' or not pol or #pol ~= 1 then return 0 end
  local mark = outcome
  if outcome == 'ok' then mark = '+' end
  local field = 'e:'
  if outcome == 'ok' then field = 'r:' end
  redis.call('HSET', rec, 'd:' .. ref, pol .. mark, field .. ref, detail)
  if outcome == 'ok' or pol == 'i' then
    local n = redis.call('HINCRBY', rec, 'n', -1)
    if n <= 0 and got[2] == '1' and not redis.call('HGET', rec, 'fx') then
      flow_release(id, rec, now)
      return 2
    end
    return 1
  end
  if got[2] == '1' then
    flow_fail(id, rec, now, ref, detail, pol == 's', why, dead_max)
    return 3
  end
  redis.call('HSETNX', rec, 'fx', ref)
  return 1
end

-- flow_gone reports whether the end of task id is recorded already (its
-- end record, :result:<id>): a record is never made again for it.
local function flow_gone(id)
  return redis.call('EXISTS', PENDING .. ':result:' .. id) == 1
end

-- flow_body_id reads the id of a body as fleet writes it ({"id":"..."
-- first), or decodes the body for another's; nil when it has none.
local function flow_body_id(body)
  local id = string.match(body, '^{"id":"([^"\\]*)"')
  if id then return id end
  local ok, v = pcall(cjson.decode, body)
  if ok and type(v) == 'table' and type(v.id) == 'string' then return v.id end
  return nil
end

-- flow_status spells the counts of flow record rec (a flow's or batch's,
-- fleet:flow:<id>) as JSON, with its state.
local function flow_status(rec)
  local g = redis.call('HMGET', rec, 'state', 'total', 'ok', 'fail', 'cancel')
  return '{"state":' .. cjson.encode(g[1] or '') .. ',"total":' .. (g[2] or 0) .. ',"succeeded":' .. (g[3] or 0) ..
    ',"failed":' .. (g[4] or 0) .. ',"canceled":' .. (g[5] or 0) .. '}'
end

-- flow_complete completes flow rec (members mem) when it is closed (or
-- cancelled) and none of its members is pending: it is done. It returns
-- {'done', callbacks JSON, status} while a done flow's callbacks are not
-- yet applied (the caller applies them, then flow_fin.lua), {'fin', '',
-- status} once a done flow has none left (it then expires after its
-- retention), or {state, '', status} for a flow not done.
local function flow_complete(rec, mem)
  local g = redis.call('HMGET', rec, 'state', 'total', 'ok', 'fail', 'cancel', 'cb', 'cbd', 'keep')
  local st = g[1]
  if not st then return {'none', '', ''} end
  if (st == 'closed' or st == 'canceled') and
      tonumber(g[2] or 0) <= tonumber(g[3] or 0) + tonumber(g[4] or 0) + tonumber(g[5] or 0) then
    redis.call('HSET', rec, 'state', 'done', 'done_at', tostring(now_ms()))
    st = 'done'
  end
  if st ~= 'done' then return {st, '', flow_status(rec)} end
  if g[6] and g[7] ~= '1' then return {'done', g[6], flow_status(rec)} end
  if g[7] ~= '1' then
    redis.call('HSET', rec, 'cbd', '1')
    local keep = tonumber(g[8] or 0)
    if keep > 0 then
      redis.call('PEXPIRE', rec, keep)
      redis.call('PEXPIRE', mem, keep)
    end
  end
  return {'fin', '', flow_status(rec)}
end
