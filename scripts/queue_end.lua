-- queue_end: end reservations other than by an ack, each if the
-- reservation that exists now is the caller's (owns in lib_queue.lua):
--   nack     an attempt failed: the task is retried after the backoff
--            (through SCHEDULED; the policy's "backoff" kind: exponential,
--            the default, fixed or linear), or buried once it has failed
--            max_attempts times;
--   bury     dead-lettered at once (Task.DeadLetter, a payload that no
--            longer decodes);
--   release  back to the head of PENDING, unchanged, no attempt counted;
--   snooze   to SCHEDULED, unchanged, due after a delay (server clock), no
--            attempt counted.
-- The task's permits (its group's, GlobalConcurrency's) come back
-- (task_done), and a released task of a group goes back to its group's
-- head. A sequential group (concurrency 1) keeps its order: a retry or a
-- snooze goes back to the group's head instead of SCHEDULED, and the task
-- keeps its permit until it is due, so the group waits for it.
-- A task that Queue.Cancel flagged (canceled) is buried as cancelled
-- whatever the mode: it never runs again. A buried task frees its dedup
-- key, and the dead letters are bounded to dead_max.
-- One call ends one reservation (Task.Nack ...) or several (the ends that
-- concurrent callers made while a call was in flight: queue_callgroup.go),
-- each on its own, in order.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- ARGV[1..4] the caller's max_attempts, backoff_base_ms, backoff_max_ms
--          and dead_max (0: none), for a queue with no stored policy
-- ARGV[5..] an end per 12 arguments, from i = 5:
--   i     'nack', 'bury', 'release' or 'snooze'
--   i+1   task id
--   i+2   the caller's lease token
--   i+3   the task's dedup key, or ''
--   i+4   the task's dead letter should it be cancelled (no "dead_at"):
--         '' when the caller has not made it (the usual case: a cancelled
--         task answers NEED_ENTRY, and the caller calls again with it),
--         '-' for i+5 itself (a nack or bury whose cause is a cancel)
--   i+5   nack, bury: the new body, attempts counted, "error" set, no
--         "dead_at"; snooze: the delay in milliseconds (>= 0); release: ''
--   i+6   nack: the attempts as counted in the new body
--   i+7   nack: a random number in [0, 1) for the jitter
--   i+8   nack: the task's own max_attempts (SubmitOptions.MaxAttempts),
--         which goes before the policy's; '0' for none
--   i+9   the task's group (SubmitOptions.Group), '' for none
--   i+10  the task's flow flags (flow_ended, lib_flow_end.lua): '' for a
--         task that is not tracked and set no progress value
--   i+11  nack: the retry's delay in ms when the caller chose it
--         (RetryAfter, the task's own Backoff, a Backoff func), else ''
--         for the policy's backoff (backoff_ms); snooze: 'p' to park a
--         durable task (a Sleep, a WaitSignal): its body is kept in its
--         steps' "\255park" for a signal to wake it (queue_signal.lua),
--         and a task whose awaited signal came while it ran is ready at
--         once (sig_ready, lib_queue.lua)
-- returns  a pair per end, in order: {DONE, n}: retried after n ms
--          (nack), released (n = 0), or snoozed until n (unix ms);
--          {BURIED, 0}; {CANCELED, 0}: buried as cancelled; {NEED_ENTRY,
--          0}: cancelled, but its dead letter is ''; {LOST, 0}: the lease
--          is lost. On LOST and NEED_ENTRY that end changes nothing.
local err = wrong_types(QUEUE_TYPES)
if err then return err end
local p = policy({max_attempts = tonumber(ARGV[1]), backoff_base_ms = tonumber(ARGV[2]),
  backoff_max_ms = tonumber(ARGV[3]), dead_max = tonumber(ARGV[4])})
local now = now_ms()
-- backoff_ms is the policy's delay of the retry after counted failures,
-- jitter in [0, 1) (Backoff.delay in backoff.go computes the same).
local function backoff_ms(counted, jitter)
  local n = math.max(counted, 1)
  if p.backoff == 'fixed' then return p.backoff_base_ms end
  if p.backoff == 'linear' then return math.min(p.backoff_base_ms * n, p.backoff_max_ms) end
  local d = p.backoff_base_ms * 2 ^ math.min(n - 1, 40)
  if d > p.backoff_max_ms then d = p.backoff_max_ms end
  return math.floor(d / 2 + jitter * d / 2)
end
local seq_limits = {} -- group -> whether it is sequential, read once per call

local function end_one(i)
  local mode, id, token, dk = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local entry, arg, counted, flags = ARGV[i+4], ARGV[i+5], tonumber(ARGV[i+6]), ARGV[i+10]
  local v = redis.call('HGET', LEASE, id)
  if not owned(v, v and redis.call('ZSCORE', PROCESSING, id), token) then
    return LOST, 0
  end
  local flagged = canceled(v)
  if flagged and entry == '' then
    return NEED_ENTRY, 0
  end
  local max_attempts = tonumber(ARGV[i+8])
  if max_attempts <= 0 then max_attempts = p.max_attempts end
  local body = redis.call('HGET', BODY, id)
  leave(id, token)
  local g = ARGV[i+9] ~= '' and ARGV[i+9] or nil
  local dead = nil
  if flagged then
    dead = entry
    if dead == '-' then dead = arg end
  elseif mode == 'bury' or (mode == 'nack' and counted >= max_attempts) then
    dead = arg
  end
  if dead then
    bury(dead, now, p.dead_max)
    free_dedup(dk, id)
    task_done(id, g)
    if flags ~= '' then
      local ok, e = pcall(cjson.decode, dead)
      flow_ended(id, flags, flagged and 'c' or 'x', ok and type(e) == 'table' and e.error or '', counted)
    end
    if flagged then return CANCELED, 0 end
    return BURIED, 0
  end
  flow_ended(id, flags) -- not an end: a progress value goes
  local d, later = 0, body
  if mode == 'nack' then
    d = tonumber(ARGV[i+11]) or backoff_ms(counted, tonumber(ARGV[i+7]))
    later = arg
  elseif mode == 'snooze' then
    d = tonumber(arg)
  end
  if mode == 'release' or not later then
    task_done(id, g)
    if later then enqueue(later, nil, now, true) end
    return DONE, 0 -- without a body there is nothing to hand back
  end
  local park = mode == 'snooze' and ARGV[i+11] == 'p'
  local ready = false
  if park and sig_ready(STEPS .. id) then
    -- It waits for a signal that came while it ran: ready now, so that
    -- no signal is lost between the wait's record and this snooze.
    d, park, ready = 0, false, true
  end
  local ret = d
  if mode == 'snooze' then ret = now + d end
  if g then
    local seq = seq_limits[g]
    if seq == nil then
      seq = group_limit(g, group_defaults(redis.call('GET', POLICY))).c == 1
      seq_limits[g] = seq
    end
    if seq and not ready then
      -- Sequential: back to the head, the permit held until it is due.
      -- A parked one names its group beside its body, for a signal to
      -- free the permit (queue_signal.lua).
      if park and redis.call('EXISTS', STEPS .. id) == 1 then
        redis.call('HSET', STEPS .. id, '\255park', later, '\255pg', g)
      end
      running_done({id})
      redis.call('ZADD', GRUN .. g, now + d, id)
      redis.call('LPUSH', GROUP .. g, later)
      redis.call('INCR', GPENDING)
      if redis.call('HSETNX', GSTATE, g, 'c') == 1 then
        redis.call('ZADD', GBLOCKED, now + d, g)
      end
      return DONE, ret
    end
  end
  task_done(id, g)
  if ready then
    enqueue(later, nil, now, g ~= nil) -- a group's: back to its head, its order kept
    return DONE, ret
  end
  redis.call('ZADD', SCHEDULED, secs(now + d), later)
  if park and redis.call('EXISTS', STEPS .. id) == 1 then
    redis.call('HSET', STEPS .. id, '\255park', later) -- for a signal to find it
  end
  return DONE, ret
end

local out = {}
for i = 5, #ARGV, 12 do
  local code, n = end_one(i)
  out[#out + 1] = code
  out[#out + 1] = n
end
return out
