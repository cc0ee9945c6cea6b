-- queue_submit: push tasks, each with its options: a dedup key, a ready
-- time, a group or a priority (in the body, where enqueue routes it). With
-- a dedup key, a task is refused while a live task holds the key (DEDUP),
-- and, when the caller names the task's unique key (SubmitOptions.
-- UniqueFor), while the window of an ended task that held it runs; a
-- refused task adds nothing, and the others go on.
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
-- ARGV[..] then per task five values: its id, its body (with "dedup", and
--          "unique_ms" with UniqueFor, and "mx" when indexed), its dedup key
--          or '', its ready_at (unix s) or '' for now, the place in KEYS of
--          its unique key or '0' for none
-- returns  the tasks' ids, in order: each task's own when pushed, or the id
--          of the task that holds its dedup key (then it added nothing)
local m = tonumber(ARGV[1])
local first = 2
if m > 0 then first = 4 + 2 * m end
if #ARGV > first + 4 then
  local err = wrong_types(QUEUE_TYPES)
  if err then return err end
end
local out, now = {}, nil
for i = first, #ARGV, 5 do
  local id, body, dk, ready, uk = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local holder = nil
  if dk ~= '' then
    holder = redis.call('HGET', DEDUP, dk)
    if not holder and uk > 0 then
      holder = redis.call('GET', KEYS[uk])
    end
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
if m > 0 then
  -- The metadata index: each task pushed joins its keys (a refused one,
  -- whose place holds another's id, does not); a key's entries past the
  -- horizon go, and the key lives the horizon after its last write. A
  -- derived key: one of another type fails its own commands (pcall).
  local touched = {}
  for j = 4, 3 + 2 * m, 2 do
    local k = tonumber(ARGV[j])
    local id = ARGV[first + 5 * (k - 1)]
    if out[k] == id then
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
