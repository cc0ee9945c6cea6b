-- queue_submit: push tasks, each with its options: a dedup key, a ready
-- time, a group or a priority (in the body, where enqueue routes it). With
-- a dedup key, a task is refused while a live task holds the key (DEDUP),
-- and, when the caller names the task's unique key (SubmitOptions.
-- UniqueFor), while the window of an ended task that held it runs; a
-- refused task adds nothing, and the others go on. A task with a mode
-- (replace, debounce) whose key names a live task that is pending or
-- scheduled gives that task its body instead, keeping the holder's id
-- (replace below); one whose holder is running changes nothing.
-- One task: no TYPE checks (HGET refuses a wrong-type dedup hash, and the
-- push, the first write, a wrong-type list or zset, before anything
-- changes). Several: the queue's keys are checked first (wrong_types), so
-- that either all go or none.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9..] fleet:queue:<name>:unique:<key>  string: id of the task that held
--          the key, PX the window (one per task with UniqueFor; see ARGV);
--          fleet:queue:<name>:meta:<key>:<canon>  zset: the metadata index
--          (QueueOptions.IndexMeta; one per indexed key of a task)
-- ARGV[1]  M, how many index entries to add (0 for a queue that indexes
--          nothing: the tasks follow at once, from ARGV[2])
-- ARGV[2..] when M > 0: the index's horizon, an id prefix (entries below it
--          go) and its length in ms (each key written gets that PEXPIRE),
--          then M pairs: the task's place among the tasks (from 1), the
--          place in KEYS of its index key
-- ARGV[..] then per task six values: its id, its body (with "dedup", and
--          "unique_ms" with UniqueFor, and "mx" when indexed), its dedup key
--          or '', its ready_at (unix s) or '' for now, the place in KEYS of
--          its unique key or '0' for none, and its mode: '' a plain submit,
--          'r' a replace (SubmitOptions.Replace), 'd<window ms>:<max wait
--          ms>' a debounce (SubmitOptions.Debounce: its ready_at is '')
-- returns  the tasks' ids, in order: each task's own when pushed, or the id
--          of the task that holds its dedup key (then it added nothing); a
--          task with a mode whose key's holder was pending or scheduled
--          gets "\255p<holder>" (the holder took its body: replace), and
--          one whose holder is running "\255r<holder>" (nothing changed)
local m = tonumber(ARGV[1])
local first = 2
if m > 0 then first = 4 + 2 * m end
if #ARGV > first + 5 then
  local err = wrong_types(QUEUE_TYPES)
  if err then return err end
end
local out, now, rep = {}, nil, {}

-- replace gives the live task holder the body of task id (its id made
-- holder's), with ready the new ready_at ('' for now): a scheduled one
-- moves to ready, or to now; a pending one keeps its place when it stays
-- on the same list (LSET) or in PRIO (its ready time kept, aged by its
-- new priority), and goes where enqueue routes it otherwise. The search
-- is O(N) in the tasks waiting (find_pending, then SCHEDULED): a replace
-- is no hot path. It returns the reply's mark for the task, or nil when
-- holder is nowhere (then the key is stale: the task is a plain submit).
local function replace(holder, id, body, ready)
  if redis.call('ZSCORE', PROCESSING, holder) then
    return '\255r' .. holder
  end
  local function holds(b)
    if not string.find(b, holder, 1, true) then return false end
    local ok, v = pcall(cjson.decode, b)
    return ok and type(v) == 'table' and v.id == holder
  end
  local old, where, at = lazy.find_pending(holds)
  local sched = false
  if not old then
    local n = redis.call('ZCARD', SCHEDULED)
    for i = 0, n - 1, 1000 do
      for _, b in ipairs(redis.call('ZRANGE', SCHEDULED, i, i + 999)) do
        if holds(b) then old = b break end
      end
      if old then break end
    end
    if not old then return nil end
    sched = true
  end
  -- The body spells its own id first: {"id":"<id>", (taskbody.New).
  local nb = '{"id":' .. cjson.encode(holder) .. string.sub(body, #id + 9)
  -- The holder's log of its earlier runs (queue_log.lua's "lg") stays
  -- its own: the mark goes with the new body, for its end to find.
  if string.find(old, '"lg":1', 1, true) and string.sub(nb, -1) == '}' then
    nb = string.sub(nb, 1, -2) .. ',"lg":1}'
  end
  local function remove()
    if sched then
      redis.call('ZREM', SCHEDULED, old)
    elseif where then
      redis.call('LREM', where, 1, old)
      if where ~= PENDING then
        if redis.call('DECR', GPENDING) <= 0 then redis.call('DEL', GPENDING) end
        -- A group left empty leaves the round (which holds only groups
        -- with tasks), unless it is blocked: its unblock looks for tasks.
        local g = string.sub(where, #GROUP + 1)
        if redis.call('EXISTS', where) == 0 and redis.call('HGET', GSTATE, g) == 'r' then
          redis.call('LREM', GROUPS, 1, g)
          redis.call('HDEL', GSTATE, g)
        end
      end
    else
      redis.call('ZREM', PRIO, old)
    end
  end
  lazy.meta_unindex(holder, old)
  if ready ~= '' then
    remove()
    redis.call('ZADD', SCHEDULED, ready, nb)
    return '\255p' .. holder
  end
  now = now or now_ms()
  local v = routed(nb)
  local g, p = group_of(v), tonumber(v and v.priority) or 0
  local ov = routed(old)
  local op = tonumber(ov and ov.priority) or 0
  -- In place on its list when its place stays right: a group's list
  -- orders priorities too (group_insert), so only at the same priority.
  if not sched and where and where == (g and GROUP .. g or PENDING) and ((g and p == op) or (not g and p <= 0)) then
    redis.call('LSET', where, at, nb)
  elseif not sched and not where and not g and p > 0 then
    local s = tonumber(redis.call('ZSCORE', PRIO, old))
    redis.call('ZREM', PRIO, old)
    redis.call('ZADD', PRIO, s + (op - p) * PRIORITY_STEP_MS, nb)
  else
    remove()
    enqueue(nb, v, now, false)
  end
  return '\255p' .. holder
end

local checked = #ARGV > first + 5
for i = first, #ARGV, 6 do
  local id, body, dk, ready, uk, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), ARGV[i + 5]
  local holder, mark = nil, nil
  if dk ~= '' then
    holder = redis.call('HGET', DEDUP, dk)
  end
  if mode ~= '' then
    -- Replace or debounce (never on the plain path). A debounce's ready
    -- time is the window from now, never past its first submit (the
    -- holder's UUIDv7 time) plus the max wait.
    if not checked then
      checked = true
      local err = wrong_types(QUEUE_TYPES)
      if err then return err end
    end
    local moved = ready
    if mode ~= 'r' then
      local win, maxw = string.match(mode, '^d(%d+):(%d+)$')
      now = now or now_ms()
      ready = secs(now + tonumber(win))
      moved = ready
      local first_ms = holder and uuid_ms(holder) or 0
      if first_ms > 0 then moved = secs(math.max(math.min(now + tonumber(win), first_ms + tonumber(maxw)), now)) end
    end
    if holder then
      mark = replace(holder, id, body, moved)
      holder = nil -- nowhere: a stale key, which a plain submit takes
    end
  end
  if mark then
    out[#out + 1] = mark
    if string.sub(mark, 2, 2) == 'p' then rep[#out] = string.sub(mark, 3) end
  else
    if not holder and uk > 0 then
      holder = redis.call('GET', KEYS[uk])
    end
    if holder then
      out[#out + 1] = holder
    else
      if ready ~= '' then
        redis.call('ZADD', SCHEDULED, ready, body)
      else
        now = now or now_ms()
        enqueue(body, nil, now, false)
      end
      if dk ~= '' then
        redis.call('HSET', DEDUP, dk, id)
      end
      out[#out + 1] = id
    end
  end
end
if m > 0 then
  -- The metadata index: each task pushed joins its keys (a refused one,
  -- whose place holds another's id, does not); a key's entries past the
  -- horizon go, and the key lives the horizon after its last write. A
  -- derived key: one of another type fails its own commands (pcall).
  local touched = {}
  for j = 4, 3 + 2 * m, 2 do
    local k = tonumber(ARGV[j])
    local id = rep[k] or ARGV[first + 6 * (k - 1)]
    if out[k] == id or rep[k] then
      local key = KEYS[tonumber(ARGV[j + 1])]
      redis.pcall('ZADD', key, 0, id)
      touched[key] = true
    end
  end
  for key in pairs(touched) do
    redis.pcall('ZREMRANGEBYLEX', key, '-', '(' .. ARGV[2])
    redis.pcall('PEXPIRE', key, ARGV[3])
  end
end
return out
