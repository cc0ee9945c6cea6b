-- lib_queue: the steps of the queue scripts (scripts.go links in the
-- blocks a script calls). Not a script by itself. Every queue script takes
-- the queue's keys as KEYS[1..8], named PENDING, PROCESSING, BODY, LEASE,
-- SCHEDULED, DEAD, DEDUP and POLICY, and the end steps answer the codes
-- LOST, DONE, BURIED, CANCELED and NEED_ENTRY: both are written once, in
-- queue_core.go, which links them in.
--
-- A reservation made by fleet has an entry in LEASE, "<token>
-- <deadline_ms>": the holder's random token and the deadline that fleet
-- last wrote for it in PROCESSING. The reservation that exists now is the
-- caller's only when both hold: the token is the caller's, and the
-- PROCESSING score is still that deadline. A client that follows only the
-- documented schema re-queues (ZREM from PROCESSING) or re-reserves (ZADD
-- with its own deadline) without touching the lease hash; either breaks
-- the second test, so a late holder can never end another's reservation.

-- record names the lease hash field that holds the ids one reserve call
-- took, "\255call:<token prefix>": the byte 255 never starts a task id
-- that fleet or a JSON client writes (ids are UTF-8).
local function record(prefix)
  return '\255call:' .. prefix
end

-- prefix_of returns the token prefix of a lease token (prefix..i).
local function prefix_of(token)
  return string.match(token, '^(.*%.)%d+$') or ''
end

-- lease_entry spells a lease hash entry.
local function lease_entry(token, deadline_ms)
  return token .. ' ' .. string.format('%d', deadline_ms)
end

-- owned reports whether a reservation whose lease entry is v and whose
-- PROCESSING score is score (either false when missing) is the one that
-- token holds (see above). An entry without a deadline (written by an
-- older fleet) is checked by its token alone. An entry may end in " c":
-- Queue.Cancel asked for the task to stop (queue_cancel.lua); the holder
-- still owns it.
local function owned(v, score, token)
  if not v or not score then return false end
  local tok, dl = string.match(v, '^(%S+) (%d+)')
  if not tok then tok = v end
  if tok ~= token then return false end
  return dl == nil or math.floor(tonumber(score) * 1000 + 0.5) == tonumber(dl)
end

-- canceled reports whether lease entry v carries Queue.Cancel's flag (" c",
-- queue_cancel.lua): the task must not run again, so whatever ends its
-- reservation other than an ack buries it, as cancelled.
local function canceled(v)
  return type(v) == 'string' and string.sub(v, -2) == ' c'
end

-- owns reports whether the reservation of id that exists now is the one
-- that token holds (owned).
local function owns(id, token)
  local v = redis.call('HGET', LEASE, id)
  if not v then return false end
  return owned(v, redis.call('ZSCORE', PROCESSING, id), token)
end

-- mark_logged marks the body of task id (BODY, while it is active) with
-- "lg": its end must delete its log and steps, or keep them with its
-- record (ack_all). Unless the body has it: at its end (queue_log.lua, an
-- earlier record), or among its sorted fields (a retry's body, which the
-- caller rewrote with it).
local function mark_logged(id)
  local body = redis.call('HGET', BODY, id)
  if body and string.sub(body, -1) == '}' and string.sub(body, -8) ~= ',"lg":1}' then
    local ok, v = pcall(cjson.decode, body)
    if not (ok and type(v) == 'table' and v.lg == 1) then
      redis.call('HSET', BODY, id, string.sub(body, 1, -2) .. ',"lg":1}')
    end
  end
end

-- keep_for makes key live at least ms more (a durable task's steps: a
-- later write never shortens what an earlier one asked for).
local function keep_for(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- A durable task's steps hash (STEPS..id, queue_step.lua) holds, beside
-- its steps (whose names never start with the byte 255):
--   "\255park"        the body the task was parked with in SCHEDULED (a
--                     Sleep, a wait), for a signal to find it
--   "\255pg"          the sequential group at whose head it is parked
--                     instead (its permit held), beside "\255park"
--   "\255wait"        the names of the signals its run waits for, a JSON
--                     array (a WaitSignal's one; AwaitChildren's, one per
--                     child: "\255c:<child id>")
--   "\255sig:<name>"  a signal sent and not yet delivered (its value), or
--                     "\255d" once delivered, "\255t" once its wait
--                     timed out: each name is delivered once.
-- sig_ready reports whether every signal that the task whose steps are sk
-- waits for was sent and not yet delivered.
local function sig_ready(sk)
  local want = redis.call('HGET', sk, '\255wait')
  if not want then return false end
  local ok, names = pcall(cjson.decode, want)
  if not ok or type(names) ~= 'table' or #names == 0 then return false end
  for _, n in ipairs(names) do
    local v = redis.call('HGET', sk, '\255sig:' .. tostring(n))
    if not v or string.byte(v, 1) == 255 then return false end
  end
  return true
end

-- with_dead_at returns a dead-letter body (a JSON object that has no
-- "dead_at") with "dead_at" set to ms, in unix seconds.
local function with_dead_at(body, ms)
  return string.sub(body, 1, -2) .. ',"dead_at":' .. secs(ms) .. '}'
end

-- policy returns the queue's stored policy (POLICY, a JSON object), or
-- fallback when there is none or it does not decode.
local function policy(fallback)
  local raw = redis.call('GET', POLICY)
  if not raw then return fallback end
  local ok, p = pcall(cjson.decode, raw)
  if not ok or type(p) ~= 'table' then return fallback end
  for k, v in pairs(fallback) do
    if type(p[k]) ~= 'number' then p[k] = v end
  end
  return p
end

-- free_dedup frees dedup key dk ('' for none) when it names task id.
local function free_dedup(dk, id)
  if dk ~= '' and redis.call('HGET', DEDUP, dk) == id then
    redis.call('HDEL', DEDUP, dk)
  end
end

-- bury appends dead letter entry (a body without "dead_at") at ms, bounded
-- to dead_max entries (0: no bound).
local function bury(entry, ms, dead_max)
  redis.call('RPUSH', DEAD, with_dead_at(entry, ms))
  if dead_max > 0 then
    redis.call('LTRIM', DEAD, -dead_max, -1)
  end
end

-- leave ends the reservation of id under token: its PROCESSING entry, its
-- body, its lease entry and its reserve call's record go (whatever ends a
-- reservation proves that its caller got the reserve's reply).
local function leave(id, token)
  redis.call('HDEL', BODY, id)
  redis.call('ZREM', PROCESSING, id)
  redis.call('HDEL', LEASE, id, record(prefix_of(token)))
end

-- uuid_ms returns the unix ms of a UUIDv7 id (fleet's task ids), or 0 for
-- an id of another form.
local function uuid_ms(id)
  if type(id) ~= 'string' then return 0 end
  local hi, lo = string.match(id, '^(%x%x%x%x%x%x%x%x)%-(%x%x%x%x)%-7')
  if not hi then return 0 end
  return tonumber(hi .. lo, 16)
end

-- routed decodes body when it may be a task of a group or a prioritized
-- one (the fields are looked for first, so that a plain body costs no
-- decode): it returns the decoded table, or nil for a plain body.
local function routed(body)
  if not (string.find(body, '"group":', 1, true) or string.find(body, '"priority":', 1, true)) then
    return nil
  end
  local ok, v = pcall(cjson.decode, body)
  if ok and type(v) == 'table' then return v end
  return nil
end

-- group_of returns the group of decoded body v, or nil.
local function group_of(v)
  local g = v and v.group
  if type(g) == 'string' and g ~= '' then return g end
  return nil
end

-- prio_score is the score in PRIO of a task of priority p that became
-- ready at ms: p steps of PRIORITY_STEP_MS before it, so that it goes
-- before the normal tasks that became ready less than that before it.
local function prio_score(p, ms)
  return ms - p * PRIORITY_STEP_MS
end

-- group_wake puts group g in the round (GROUPS) when it is idle (it has no
-- state in GSTATE: not in the round, not blocked, not paused), and the
-- documented list too, as the round's member '' (once a queue has groups,
-- its ungrouped tasks take their turn like a group). It bumps SIGNAL:
-- waiting reserves wake.
local function group_wake(g)
  if redis.call('HSETNX', GSTATE, g, 'r') == 1 then
    if redis.call('SISMEMBER', GPAUSED, g) == 1 then
      redis.call('HSET', GSTATE, g, 'p')
      return
    end
    redis.call('RPUSH', GROUPS, g)
    if redis.call('HSETNX', GSTATE, '', 'r') == 1 then
      redis.call('RPUSH', GROUPS, '')
    end
  end
  redis.call('INCR', SIGNAL)
end

-- group_unblock ends group g's block (a limit, a pause): it leaves
-- GBLOCKED and its state, and goes back in the round when it has tasks.
local function group_unblock(g)
  redis.call('ZREM', GBLOCKED, g)
  redis.call('HDEL', GSTATE, g)
  if redis.call('EXISTS', GROUP .. g) == 1 then
    group_wake(g)
  end
end

-- group_score is the aged score of body, a task on a group's list: when
-- it was submitted (its UUIDv7 id), less PRIORITY_STEP_MS for each level
-- of its priority (prio_score). A body whose id is not a UUIDv7 scores 0,
-- as the oldest.
local function group_score(body)
  local ms = uuid_ms(string.match(body, '"id":"([%x%-]+)"'))
  if string.find(body, '"priority":', 1, true) then
    local ok, v = pcall(cjson.decode, body)
    local p = ok and type(v) == 'table' and tonumber(v.priority)
    if p and p > 0 then return prio_score(p, ms) end
  end
  return ms
end

-- group_insert puts body, a prioritized task, on group g's list in the
-- aged order of priorities (group_score, of when each was submitted: the
-- same clock for all, so that tasks of one priority keep their submit
-- order): after the last task that goes before it or with it, first when
-- none does. It looks from the tail, a chunk at a time: O(the tasks it
-- goes before), and one RPUSH when it goes last. The group's list stays
-- the one list that reserves LPOP.
local function group_insert(g, body)
  local key = GROUP .. g
  local score = group_score(body)
  local n = redis.call('LLEN', key)
  local stop, pivot = n, nil
  while stop > 0 and not pivot do
    local start = math.max(stop - 100, 0)
    local chunk = redis.call('LRANGE', key, start, stop - 1)
    for i = #chunk, 1, -1 do
      if group_score(chunk[i]) <= score then
        if start + i == n then
          redis.call('RPUSH', key, body) -- last: after the tail
          return
        end
        pivot = chunk[i]
        break
      end
    end
    stop = start
  end
  if pivot then
    redis.call('LINSERT', key, 'AFTER', pivot, body)
  else
    redis.call('LPUSH', key, body)
  end
end

-- enqueue puts a ready task's body where reserves take it: a task of a
-- group on its group's list (the group woken; a prioritized one in the
-- aged order of priorities: group_insert), a prioritized one in PRIO by
-- its aged score, any other on the documented list. head puts it first
-- (a release, a re-queue), else last. v is the decoded body, or nil to
-- decode it only when it may be routed (routed). now is the server's ms.
local function enqueue(body, v, now, head)
  if v == nil then v = routed(body) end
  local g = group_of(v)
  if g then
    local p = tonumber(v.priority)
    if p and p > 0 and not head then
      group_insert(g, body)
    else
      redis.call(head and 'LPUSH' or 'RPUSH', GROUP .. g, body)
    end
    redis.call('INCR', GPENDING)
    group_wake(g)
    return
  end
  local p = v and tonumber(v.priority)
  if p and p > 0 then
    local at = now
    if head then at = uuid_ms(v.id) end -- back to its place among its equals
    redis.call('ZADD', PRIO, prio_score(p, at), body)
    redis.call('INCR', SIGNAL)
    return
  end
  redis.call(head and 'LPUSH' or 'RPUSH', PENDING, body)
end

-- move_due moves the due scheduled tasks (up to max) where reserves take
-- them: the plain ones onto the documented list in one push (which a
-- wrong-type list refuses before any write), the others where enqueue
-- routes them. It returns how many it moved.
local function move_due(now, max)
  local due = redis.call('ZRANGEBYSCORE', SCHEDULED, '-inf', secs(now), 'LIMIT', 0, max)
  if #due == 0 then return 0 end
  local plain = {}
  for _, b in ipairs(due) do
    local v = routed(b)
    if v then enqueue(b, v, now, false) else plain[#plain + 1] = b end
  end
  if #plain > 0 then
    redis.call('RPUSH', PENDING, unpack(plain))
  end
  redis.call('ZREM', SCHEDULED, unpack(due))
  return #due
end

-- policy_num returns the number field name of raw, the stored policy's
-- JSON (false when there is none), or 0: read without a decode, for the
-- reserve's hot path (the policy is flat, and fleet writes it).
local function policy_num(raw, name)
  if not raw then return 0 end
  return tonumber(string.match(raw, '"' .. name .. '":(%d+)')) or 0
end

-- CAP_WAIT is GSTATE's field that a reserve turned away by the queue's
-- GlobalConcurrency sets (no group is named so), so that the next task to
-- end bumps SIGNAL for the waiting reserves (running_done).
local CAP_WAIT = '\255cap'

-- held counts the permits in zset key (a group's GRUN, or RUNNING: task ids
-- by lease deadline, ms) at now. A permit whose deadline passed is dropped
-- when its task is no longer reserved; while it is (extended, or expired
-- and waiting for the sweeper, which re-queues it and returns the permit),
-- it moves to the reservation's deadline, or a second on: so a crashed
-- holder's permit comes back with its task, and a task waiting to run
-- again never lets the next of a sequential group go first.
local function held(key, now)
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, 16)
  for _, id in ipairs(due) do
    local s = tonumber(redis.call('ZSCORE', PROCESSING, id))
    if not s then
      redis.call('ZREM', key, id)
    else
      local dl = math.floor(s * 1000)
      if dl <= now then dl = now + 1000 end
      redis.call('ZADD', key, dl, id)
    end
  end
  return redis.call('ZCARD', key)
end

-- running_done returns the permits of GlobalConcurrency that tasks ids
-- held (RUNNING), and bumps SIGNAL when a reserve was turned away for
-- want of one (CAP_WAIT).
local function running_done(ids)
  if redis.call('ZREM', RUNNING, unpack(ids)) > 0 and redis.call('HDEL', GSTATE, CAP_WAIT) == 1 then
    redis.call('INCR', SIGNAL)
  end
end

-- group_done returns the permit that task id held in group g (its entry in
-- GRUN..g), and puts the group back in the round when it waited for one
-- (state 'c').
local function group_done(g, id)
  redis.call('ZREM', GRUN .. g, id)
  if redis.call('HGET', GSTATE, g) == 'c' then
    group_unblock(g)
  end
end

-- task_done returns every permit that task id held: its group's (g, or
-- nil) and GlobalConcurrency's.
local function task_done(id, g)
  if g then group_done(g, id) end
  running_done({id})
end

-- list_ms is when a body of the documented list became ready, as far as
-- fleet can tell: the time of its UUIDv7 id (0 for an id of another form:
-- it goes first).
local function list_ms(body)
  return uuid_ms(string.match(body, '^{"id":"([%x%-]+)"'))
end

-- take_ungrouped takes up to k ungrouped bodies, in the aged order of
-- priorities: the documented list's head against PRIO's first, by when
-- each became ready (list_ms; prio_score). It appends them to popped and
-- their sources to from (false: PENDING; a number: the PRIO score), and
-- returns how many it took.
local function take_ungrouped(k, popped, from)
  local pr = redis.call('ZRANGE', PRIO, 0, k - 1, 'WITHSCORES')
  if #pr == 0 then
    local got = redis.call('LPOP', PENDING, k)
    if not got then return 0 end
    for _, b in ipairs(got) do
      popped[#popped + 1] = b
      from[#popped] = false
    end
    return #got
  end
  local list = redis.call('LRANGE', PENDING, 0, k - 1)
  local i, j, taken = 1, 1, {}
  for _ = 1, k do
    local ps = pr[2 * i] and tonumber(pr[2 * i])
    local lb = list[j]
    if ps and (not lb or ps < list_ms(lb)) then
      popped[#popped + 1] = pr[2 * i - 1]
      from[#popped] = ps
      taken[#taken + 1] = pr[2 * i - 1]
      i = i + 1
    elseif lb then
      popped[#popped + 1] = lb
      from[#popped] = false
      j = j + 1
    else
      break
    end
  end
  if #taken > 0 then redis.call('ZREM', PRIO, unpack(taken)) end
  if j > 1 then redis.call('LPOP', PENDING, j - 1) end
  return #taken + j - 1
end

-- group_defaults returns the limits of a group without limits of its own:
-- the stored policy's (raw, its JSON; QueueOptions.Groups).
local function group_defaults(raw)
  return {c = policy_num(raw, 'group_concurrency'), iv = policy_num(raw, 'group_interval_us'),
    b = math.max(policy_num(raw, 'group_burst'), 1)}
end

-- group_limit returns group g's limits: its own (GLIMITS, a JSON object
-- {"c": concurrency, "iv": the rate's emission interval in µs, "b": burst};
-- Queue.SetGroupLimit), else defaults (group_defaults); 0 means none.
-- taken counts what the reserve took of the group so far.
local function group_limit(g, defaults)
  local raw = redis.call('HGET', GLIMITS, g)
  if raw then
    local ok, l = pcall(cjson.decode, raw)
    if ok and type(l) == 'table' then
      return {c = tonumber(l.c) or 0, iv = tonumber(l.iv) or 0, b = math.max(tonumber(l.b) or 1, 1), taken = 0}
    end
  end
  return {c = defaults.c, iv = defaults.iv, b = defaults.b, taken = 0}
end

-- group_room returns how many of up to k tasks group g may start now
-- under its limits l; when none, also the state it leaves the round with
-- and until when ('p': paused, until resumed; 'c': its concurrency is
-- full, until its first permit's deadline or a permit comes back; 't':
-- its rate, until its next token: the GCRA of Limiter, in GRATE..g). A
-- rate's arrival time is left in l.tat, for take_fair to move; l.full
-- says which limit ('c' or 't') the group reaches if it starts all it may.
local function group_room(g, l, now, k)
  l.full = nil
  if redis.call('SISMEMBER', GPAUSED, g) == 1 then
    return 0, 'p', nil
  end
  if l.c > 0 then
    local room = l.c - held(GRUN .. g, now) - l.taken
    if room <= 0 then
      local first = redis.call('ZRANGE', GRUN .. g, 0, 0, 'WITHSCORES')
      return 0, 'c', tonumber(first[2]) or (now + 1000)
    end
    if room <= k then k, l.full = room, 'c' end
  end
  if l.iv > 0 then
    local us = now * 1000
    -- The arrival time may lag now by half an interval: a reserve that
    -- comes a little late for its token (the wake-up, the round trip)
    -- keeps the pace, where a strict GCRA would lose that time at every
    -- token; at rest it adds nothing to the burst.
    local tat = gcra_tat(GRATE .. g, us - l.iv / 2) or us -- no number: start afresh
    local avail = gcra_avail(tat, us, l.iv, l.b)
    if avail == 0 then
      return 0, 't', math.ceil((tat - (l.b - 1) * l.iv) / 1000)
    end
    if avail <= k then k, l.full = avail, 't' end
    l.tat = tat
  end
  return k, nil, nil
end

-- leave_round takes group g out of the round (it is the round's tail,
-- just moved there): blocked in state until til (ms; nil: until
-- resumed), or idle when state is nil (emptied: a submit wakes it).
local function leave_round(g, state, til)
  redis.call('RPOP', GROUPS)
  if state then
    redis.call('HSET', GSTATE, g, state)
    if til then redis.call('ZADD', GBLOCKED, til, g) end
  else
    redis.call('HDEL', GSTATE, g)
  end
end

-- end_round takes the documented list's turn out of the round when it is
-- the round's last member and has nothing: the round ends (group_wake
-- starts it again).
local function end_round()
  redis.call('RPOP', GROUPS)
  redis.call('HDEL', GSTATE, '')
end

-- blocked_until returns, when a take got fewer than n bodies (popped), the
-- earliest time (ms) a blocked group may run again (GBLOCKED's first), so
-- that the reserve says when to look again; else nil.
local function blocked_until(n, popped)
  if #popped >= n then return nil end
  local first = redis.call('ZRANGE', GBLOCKED, 0, 0, 'WITHSCORES')
  return tonumber(first[2])
end

-- take_fair takes up to n bodies for a reserve of a queue with groups or
-- priorities, round-robin over GROUPS (the groups that may run, and '' for
-- the ungrouped tasks: take_ungrouped), each visit a fair share of what
-- is left to take (so a reserve of n from g groups takes about n/g of
-- each). A group that reaches its limit leaves the round at once, and
-- one found paused (for GBLOCKED, until its block ends or a permit comes
-- back; while paused, until resumed), and an emptied one too, so a visit
-- is O(1) however many groups are blocked, and a reserve seldom visits a
-- group that gives it nothing. It appends to popped and from as take_ungrouped does (a
-- group's bodies from its name). It returns the earliest time (ms) a
-- blocked group may run again when it took fewer than n, else nil; and
-- whether it looked at every group in the round (false when it stopped at
-- its bound of visits: more may be left). raw is the stored policy
-- (group_defaults); lease is the reserve's lease (ms).
local function take_fair(n, now, popped, from, raw, lease)
  local back = redis.call('ZRANGEBYSCORE', GBLOCKED, '-inf', now, 'LIMIT', 0, 32)
  for _, g in ipairs(back) do
    group_unblock(g)
  end
  local size = redis.call('LLEN', GROUPS)
  if size == 0 then
    take_ungrouped(n, popped, from)
    return blocked_until(n, popped), true
  end
  local defaults = group_defaults(raw)
  -- idle counts the visits in a row of members that gave nothing and
  -- stayed in the round; a member that leaves it shrinks size instead, so
  -- the take goes on to the members after it.
  local limits, ungrouped_done, idle, visits = {}, false, 0, 0
  while #popped < n and idle < size do
    if visits == n + 64 then return nil, false end
    visits = visits + 1
    local g = redis.call('LMOVE', GROUPS, GROUPS, 'LEFT', 'RIGHT')
    if not g then break end
    local k = math.ceil((n - #popped) / size)
    local took, before = 0, size
    if g == '' then
      if not ungrouped_done then
        took = take_ungrouped(k, popped, from)
        ungrouped_done = took == 0
      end
      if took == 0 and size == 1 then
        end_round()
        size = 0
      end
    else
      local l = limits[g]
      if not l then
        l = group_limit(g, defaults)
        limits[g] = l
      end
      local m, state, til = group_room(g, l, now, k)
      local got = m > 0 and redis.call('LPOP', GROUP .. g, m)
      if got then
        for _, b in ipairs(got) do
          popped[#popped + 1] = b
          from[#popped] = g
        end
        took = #got
        l.taken = l.taken + took
        if redis.call('DECRBY', GPENDING, took) <= 0 then redis.call('DEL', GPENDING) end
        if l.tat then
          l.tat = l.tat + took * l.iv
          gcra_set(GRATE .. g, l.tat, now * 1000 - l.iv / 2) -- kept while it may lag now
        end
        if took < m or (not l.full and redis.call('EXISTS', GROUP .. g) == 0) then
          leave_round(g, nil, nil) -- emptied: the round holds only groups with tasks
          size = size - 1
        elseif l.full == 'c' then
          -- At its concurrency now: out until a permit comes back (or
          -- the first lease ends: these tasks' permits end at now + lease).
          local first = redis.call('ZRANGE', GRUN .. g, 0, 0, 'WITHSCORES')
          leave_round(g, 'c', math.min(tonumber(first[2]) or (now + lease), now + lease))
          size = size - 1
        elseif l.full == 't' then
          leave_round(g, 't', math.ceil((l.tat - (l.b - 1) * l.iv) / 1000)) -- out until its next token
          size = size - 1
        end
      else
        leave_round(g, state, til) -- blocked, or emptied: no task was left on its list
        size = size - 1
      end
    end
    if took > 0 then
      idle = 0
    elseif size == before then
      idle = idle + 1
    end
  end
  if size == 1 and #popped < n and redis.call('LINDEX', GROUPS, 0) == '' and redis.call('EXISTS', PENDING, PRIO) == 0 then
    end_round()
  end
  return blocked_until(n, popped), true
end

-- find_pending finds the body that holds (a function of a body) accepts
-- among the tasks waiting to run: on the documented list, in PRIO, on each
-- group's list, read in chunks (O(N) in the tasks waiting: an operator's
-- call). It returns the body and where it is (the list's key, or false
-- for PRIO) and, on a list, its index there; or nil.
local function find_pending(holds)
  local function in_list(key)
    local n = redis.call('LLEN', key)
    for i = 0, n - 1, 1000 do
      for j, body in ipairs(redis.call('LRANGE', key, i, i + 999)) do
        if holds(body) then return body, i + j - 1 end
      end
    end
    return nil
  end
  local b, at = in_list(PENDING)
  if b then return b, PENDING, at end
  local n = redis.call('ZCARD', PRIO)
  for i = 0, n - 1, 1000 do
    for _, body in ipairs(redis.call('ZRANGE', PRIO, i, i + 999)) do
      if holds(body) then return body, false end
    end
  end
  for _, g in ipairs(redis.call('HKEYS', GSTATE)) do
    if g ~= '' and g ~= CAP_WAIT then
      b, at = in_list(GROUP .. g)
      if b then return b, GROUP .. g, at end
    end
  end
  return nil
end

-- meta_unindex removes task id from the metadata index keys its body
-- names in "mx" (QueueOptions.IndexMeta: each METAIDX .. "<key>:<canon>").
-- A derived key: one of another type fails its own ZREM (pcall), never
-- the caller's step.
local function meta_unindex(id, body)
  local mx = body and string.match(body, '"mx":(%b[])')
  if not mx then return end
  local ok, list = pcall(cjson.decode, mx)
  if not ok or type(list) ~= 'table' then return end
  for _, suffix in ipairs(list) do
    if type(suffix) == 'string' and suffix ~= '' then
      redis.pcall('ZREM', METAIDX .. suffix, id)
    end
  end
end

-- ack_all acks the tasks given from ARGV[from]: the count P of plain acks,
-- P plain acks as triples (id, lease token, dedup key or ''; a task that
-- holds no permit: its reserve said so), then acks that keep something,
-- belong to a group, hold a GlobalConcurrency permit or pass on their end
-- as 10-tuples (id, token, dedup key, unique window ms or '0', retention ms
-- or '0', result JSON or '', attempts, group or '', flags or '', the run's
-- log entry as '<runs>:<entry>' or ''), the
-- j-th of which (from 1) has its unique key and its result key at
-- KEYS[keys + 2j - 2] and KEYS[keys + 2j - 1]. Each is acked when the
-- reservation that exists now is the caller's (owned): it leaves
-- PROCESSING, BODY and LEASE, its dedup key is freed when it still names
-- the task (held on for its unique window instead, when it has one), its
-- record is kept for the retention, its permits come back (task_done; the
-- plain ones hold none), and the end of a tracked task (or of one that set
-- a progress value) is passed on (flow_ended, lib_flow_end.lua). Flags
-- are 'm' first when the task leaves the metadata index (meta_unindex),
-- then 'l' when it may have a log (queue_log.lua: deleted, or kept as
-- long as its record; an ack that keeps the record appends the run's own
-- entry first, keeping the newest <runs>), then the flow flags
-- (flow_ended). The plain
-- ones take a fixed number of commands whatever their count (HMGET and
-- ZMSCORE check them all, one HDEL, ZREM and HDEL end them). Returns one
-- code per ack, in order (DONE or LOST), as a string of digits. The reads
-- refuse a wrong-type key before any write.
local function ack_all(from, keys)
  local plain = tonumber(ARGV[from])
  local res = {}
  local first = from + 1
  if plain > 0 then
    local ids = {}
    for j = 1, plain do ids[j] = ARGV[first + 3 * j - 3] end
    local entries = redis.call('HMGET', LEASE, unpack(ids))
    local scores = redis.call('ZMSCORE', PROCESSING, unpack(ids))
    local done, fields, dkeys = {}, {}, {}
    for j, id in ipairs(ids) do
      local token = ARGV[first + 3 * j - 2]
      if owned(entries[j], scores[j], token) then
        res[j] = DONE
        done[#done + 1] = id
        fields[#fields + 1] = id
        fields[#fields + 1] = record(prefix_of(token))
        local dk = ARGV[first + 3 * j - 1]
        if dk ~= '' and redis.call('HGET', DEDUP, dk) == id then
          dkeys[#dkeys + 1] = dk
        end
      else
        res[j] = LOST
      end
    end
    if #done > 0 then
      redis.call('HDEL', BODY, unpack(done))
      redis.call('ZREM', PROCESSING, unpack(done))
      redis.call('HDEL', LEASE, unpack(fields))
      if #dkeys > 0 then
        redis.call('HDEL', DEDUP, unpack(dkeys))
      end
    end
  end
  local j = 0
  for i = first + 3 * plain, #ARGV, 10 do
    j = j + 1
    local id, token, dk = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local code = LOST
    if owns(id, token) then
      code = DONE
      local holder = dk ~= '' and redis.call('HGET', DEDUP, dk) == id
      local flags = ARGV[i + 8]
      if string.byte(flags, 1) == 109 then -- 'm'
        lazy.meta_unindex(id, redis.call('HGET', BODY, id))
        flags = string.sub(flags, 2)
      end
      local logged = string.byte(flags, 1) == 108 -- 'l'
      if logged then flags = string.sub(flags, 2) end
      leave(id, token)
      if holder then
        redis.call('HDEL', DEDUP, dk)
        if tonumber(ARGV[i + 3]) > 0 then
          redis.call('SET', KEYS[keys + 2 * j - 2], id, 'PX', ARGV[i + 3])
        end
      end
      local result = ARGV[i + 5]
      if result == '' then result = 'null' end
      local keep = tonumber(ARGV[i + 4])
      if keep > 0 then
        local worker = string.match(token, '^(.*)/[^/]*$') or ''
        local now = now_ms()
        redis.call('SET', KEYS[keys + 2 * j - 1], '{"id":' .. cjson.encode(id) .. ',"result":' .. result ..
          ',"attempts":' .. ARGV[i + 6] .. ',"done_at":' .. secs(now) .. ',"worker":' .. cjson.encode(worker) .. '}',
          'PX', keep)
        -- The index of the records kept (RETAINED), for listing them: the
        -- ids past the retention leave it, and it goes with the last one.
        -- A derived key: one of another type fails its own commands
        -- (pcall), never the ack.
        redis.pcall('ZADD', RETAINED, secs(now), id)
        redis.pcall('ZREMRANGEBYSCORE', RETAINED, '-inf', '(' .. secs(now - keep))
        redis.pcall('PEXPIRE', RETAINED, keep)
      end
      -- The task's log (queue_log.lua) and its steps (queue_step.lua)
      -- live as long as its record, and go with the ack of a task that
      -- keeps none.
      if logged then
        if keep > 0 then
          local runs, entry = string.match(ARGV[i + 9], '^(%d+):(.*)$')
          if runs then
            redis.pcall('RPUSH', TLOG .. id, entry)
            redis.pcall('LTRIM', TLOG .. id, -tonumber(runs), -1)
          end
          redis.pcall('PEXPIRE', TLOG .. id, keep)
          redis.pcall('PEXPIRE', STEPS .. id, keep)
        else
          redis.call('DEL', TLOG .. id, STEPS .. id)
        end
      end
      local g = ARGV[i + 7]
      lazy.task_done(id, g ~= '' and g or nil)
      if flags ~= '' then lazy.flow_ended(id, flags, 'ok', result) end
    end
    res[plain + j] = code
  end
  return table.concat(res)
end
