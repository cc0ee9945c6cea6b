-- queue_reserve: optionally ack tasks the caller holds, then move the due
-- scheduled tasks onto the queue and reserve up to N tasks from its head,
-- in one atomic step (a crash cannot lose a task between the pop and the
-- registration; racing reservers never get the same task). A worker acks
-- the tasks its slots finished and takes their next ones in one call;
-- queue_ack.lua runs the same ack step (ack_all) alone, for Task.Ack.
-- A body that is not a JSON object with a non-empty string "id" is
-- poison: it goes to the dead letters, wrapped as
-- {"body": <raw body>, "error": <reason>, "dead_at": <unix s>}.
-- The call records the ids it reserved in the lease hash, under the field
-- record(prefix) (lib_queue.lua), written by the same HSET as the lease
-- entries; ack, nack, release and the sweeper delete it. A caller that
-- gave up while the script was in flight hands them back with
-- queue_abandon.lua, which leaves a tombstone (KEYS[9]) when the script had
-- not run yet: then it takes nothing (the acks, checked by their own
-- tokens, still apply).
-- The commands do not grow with N or with the acks: the reserved tasks are
-- registered by one ZADD and two HSETs, the plain acks checked and ended
-- by ack_all's five.
-- No TYPE checks: every key is read or written by a command that refuses a
-- wrong type before a write it would spoil, or the writes are undone
-- (see undo), so a wrong-type key changes nothing.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9]  fleet:queue:<name>:call:<prefix>     string: the call's tombstone (derived)
-- KEYS[10..] the unique key and the result key of each ack that keeps
--          something (see ack_all in lib_queue.lua)
-- ARGV[1]  N, how many tasks to reserve at most (>= 0; 0 only acks)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  token prefix (random per call; the i-th task's token is prefix..i)
-- ARGV[4]  how many due scheduled tasks to move at most; 0 skips the look
--          at SCHEDULED (the caller looked recently; the sweeper and the
--          next look move what falls due meanwhile)
-- ARGV[5]  bound on the dead letters' count when no policy is stored (0: none)
-- ARGV[6]  flags: 1 to learn whether tasks are left pending; plus 2 when
--          the caller holds fleet-wide permits for the tasks (a sharded
--          queue's GlobalConcurrency, fleet:queue:<name>:permits): the
--          stored global_concurrency is not applied here
-- ARGV[7..] the tasks to ack first (ack_all): how many plain acks, then
--          the plain acks as triples, then the acks that keep something or
--          belong to a group as 10-tuples
-- returns  {now_ms, left, next_ready, wake, acked, signal, id1, token1,
--          body1, ...}, or {'0', 1, '-', '', acked, '0', error} when the
--          acks were done and the reserve then failed (a wrong-type key: it
--          changed nothing). left is 0 when nothing is left pending, 1 when
--          something is or may be (always 1 unless ARGV[6] asked), 2 when
--          the queue's GlobalConcurrency (the stored policy's
--          global_concurrency) is reached, plus 4 when the tasks taken hold
--          GlobalConcurrency permits (their acks must give them back); next_ready is the earliest
--          scheduled ready_at (unix s) when none was due, '' when none is
--          scheduled, '-' when SCHEDULED was not looked at; wake is when
--          (server ms) a group at its limit, or the GlobalConcurrency, may
--          let a task go next, '' when nothing waits on a limit; acked has
--          a code per ack, in order: DONE, or LOST when the lease was lost
--          ('' without acks); signal is SIGNAL's value ('0' while the queue
--          has never had groups or priorities): it rises whenever grouped
--          or prioritized work becomes available, or a GlobalConcurrency
--          permit comes back to a queue that turned a reserve away, so a
--          waiter compares it.
-- The queue takes from its groups and priorities (take_fair) once SIGNAL
-- exists, and from the documented list alone before that.


-- undo hands back what take did when a write fails on a wrong-type key:
-- the tasks it registered (when registered: their ids are out[7], out[10],
-- ...; with their permits, grun: group -> ids) and the dead letters it
-- wrote go, and each popped body goes back, first, where it came from
-- (from[i]: false or nil the documented list, a number PRIO's score, a string its
-- group).
local function undo(popped, from, out, dead, e, registered, grun)
  for i = 7, registered and #out or 0, 3 do
    local id = out[i]
    redis.pcall('ZREM', PROCESSING, id)
    redis.pcall('HDEL', BODY, id)
    redis.pcall('HDEL', LEASE, id)
    redis.pcall('ZREM', RUNNING, id)
  end
  for g, ids in pairs(registered and grun or {}) do
    redis.pcall('ZREM', GRUN .. g, unpack(ids))
  end
  for _ = 1, dead do redis.pcall('RPOP', DEAD) end
  local woken = {}
  for i = #popped, 1, -1 do
    local src = from[i]
    if not src then
      redis.pcall('LPUSH', PENDING, popped[i])
    elseif type(src) == 'number' then
      redis.pcall('ZADD', PRIO, src, popped[i])
    else
      redis.pcall('LPUSH', GROUP .. src, popped[i])
      redis.pcall('INCR', GPENDING)
      if not woken[src] then
        -- take_fair may have taken it out of the round (emptied): back
        -- in, unless it is blocked (it comes back by itself then).
        woken[src] = true
        pcall(lazy.group_wake, src)
      end
    end
  end
  return redis.error_reply(e.err or tostring(e))
end

-- take reserves the tasks (everything but the acks). Every table, closure
-- and string it makes is garbage for the server's Lua to collect: it makes
-- as few as it can.
local function take(acked)
  local n = tonumber(ARGV[1])
  if n == 0 then
    return {'0', 1, '-', '', acked, '0'}
  end
  -- One command for the call's tombstone, SIGNAL and the policy.
  local got = redis.call('MGET', KEYS[9], SIGNAL, POLICY)
  if got[1] then
    return {'0', 1, '-', '', acked, '0'}
  end
  local now = now_ms()
  local out = {tostring(now), 1, '-', '', acked, '0'}
  local signal, raw = got[2], got[3]
  if ARGV[4] ~= '0' then
    out[3] = ''
    local first = redis.call('ZRANGE', SCHEDULED, 0, 0, 'WITHSCORES')
    if #first > 0 then
      if tonumber(first[2]) * 1000 <= now then
        lazy.move_due(now, tonumber(ARGV[4]))
        signal = signal or redis.call('GET', SIGNAL)
      else
        out[3] = first[2]
      end
    end
  end
  local flags = tonumber(ARGV[6])
  local cap = 0
  if flags < 2 then cap = policy_num(raw, 'global_concurrency') end
  if cap > 0 then
    local room = cap - lazy.held(RUNNING, now)
    if room <= 0 then
      redis.call('HSET', GSTATE, CAP_WAIT, '1')
      local first = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
      out[2], out[4], out[6] = 2, first[2] or '', redis.call('GET', SIGNAL) or '0'
      return out
    end
    if room < n then n = room end
  end
  local popped, from, complete = {}, {}, true
  if signal then
    local ok, wake, all = pcall(lazy.take_fair, n, now, popped, from, raw, tonumber(ARGV[2]))
    if not ok then return undo(popped, from, out, 0, wake, false) end
    if wake then out[4] = string.format('%d', wake) end
    complete = all
    out[6] = redis.call('GET', SIGNAL) or '0'
  else
    popped = redis.call('LPOP', PENDING, n) or {}
  end
  local poisoned = 0
  if #popped > 0 then
    local deadline = now + tonumber(ARGV[2])
    local score = secs(deadline)
    local lease_end = ' ' .. string.format('%d', deadline)
    local prefix = ARGV[3]
    local scored, bodies, leases, ids, running, grun = {}, {}, {}, {}, {}, {}
    for i = 1, #popped do
      local body = popped[i]
      local ok, v = pcall(cjson.decode, body)
      local id = ok and type(v) == 'table' and v.id
      if type(id) == 'string' and id ~= '' then
        local token = prefix .. i
        local m = #ids + 1
        ids[m] = id
        scored[2 * m - 1], scored[2 * m] = score, id
        bodies[2 * m - 1], bodies[2 * m] = id, body
        leases[2 * m - 1], leases[2 * m] = id, token .. lease_end
        running[2 * m - 1], running[2 * m] = deadline, id
        out[#out + 1] = id
        out[#out + 1] = token
        out[#out + 1] = body
        local g = from[i]
        if type(g) == 'string' then
          grun[g] = grun[g] or {}
          table.insert(grun[g], id)
        end
      else
        local why = 'body has no usable id'
        if not ok then
          why = 'body is not JSON'
        elseif type(v) ~= 'table' then
          why = 'body is not a JSON object'
        end
        local r = redis.pcall('RPUSH', DEAD, cjson.encode({body = body, error = why, dead_at = now / 1000}))
        if type(r) == 'table' then return undo(popped, from, out, poisoned, r, false) end
        poisoned = poisoned + 1
      end
    end
    if #ids > 0 then
      leases[#leases + 1] = record(prefix)
      leases[#leases + 1] = cjson.encode(ids)
      local r = redis.pcall('ZADD', PROCESSING, unpack(scored))
      if type(r) == 'table' then return undo(popped, from, out, poisoned, r, false) end
      r = redis.pcall('HSET', BODY, unpack(bodies))
      if type(r) ~= 'table' then r = redis.pcall('HSET', LEASE, unpack(leases)) end
      if type(r) ~= 'table' and cap > 0 then r = redis.pcall('ZADD', RUNNING, unpack(running)) end
      for g, gids in pairs(grun) do
        if type(r) == 'table' then break end
        local scores = {}
        for j, id in ipairs(gids) do scores[2 * j - 1], scores[2 * j] = deadline, id end
        r = redis.pcall('ZADD', GRUN .. g, unpack(scores))
      end
      if type(r) == 'table' then return undo(popped, from, out, poisoned, r, true, grun) end
    end
    if poisoned > 0 then
      local bound = policy({dead_max = tonumber(ARGV[5])}).dead_max
      if bound > 0 then
        redis.call('LTRIM', DEAD, -bound, -1)
      end
    end
  end
  if flags % 2 == 1 and ((#popped < n and complete) or (not signal and redis.call('LLEN', PENDING) == 0)) then
    out[2] = 0
  end
  if cap > 0 and #popped > 0 then
    out[2] = out[2] + 4 -- the tasks hold GlobalConcurrency permits: their acks give them back
  end
  return out
end

local acked = ''
if #ARGV > 7 or tonumber(ARGV[7]) > 0 then
  acked = ack_all(7, 10)
end
local ok, res = pcall(take, acked)
if ok and not (type(res) == 'table' and res.err) then
  return res
end
-- The acks are done: say so, with the reserve's error.
return {'0', 1, '-', '', acked, '0', type(res) == 'table' and res.err or tostring(res)}
