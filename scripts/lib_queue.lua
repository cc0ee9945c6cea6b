-- lib_queue: helpers of the queue scripts (scripts.go links in the blocks
-- a script calls). Not a script by itself.
--
-- A reservation made by fleet has an entry in :processing:lease,
-- "<token> <deadline_ms>": the holder's random token and the deadline that
-- fleet last wrote for it in :processing. The reservation that exists now
-- is the caller's only when both hold: the token is the caller's, and the
-- :processing score is still that deadline. A client that follows only the
-- documented schema re-queues (ZREM from :processing) or re-reserves (ZADD
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
-- :processing score is score (either false when missing) is the one that
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
local function owns(processing, lease, id, token)
  local v = redis.call('HGET', lease, id)
  if not v then return false end
  return owned(v, redis.call('ZSCORE', processing, id), token)
end

-- ack ends the reservation of id for good (the task is done) when the
-- reservation that exists now is token's (owns): its body, its
-- :processing entry, its lease entry and its reserve call's record go, and
-- the dedup key when this task still holds it. Returns 1 when acked, 0 when
-- the lease is lost (then nothing changes). No TYPE checks: HGET and ZSCORE
-- refuse a wrong-type lease hash or :processing, and the first write (HDEL
-- of the body) a wrong-type body hash, before anything changes.
local function ack(processing, body, lease, dedup, id, token, dedup_key)
  if not owns(processing, lease, id, token) then
    return 0
  end
  local holder = false
  if dedup_key ~= '' then
    holder = redis.call('HGET', dedup, dedup_key) == id
  end
  redis.call('HDEL', body, id)
  redis.call('ZREM', processing, id)
  -- The reserve call's record goes too: an ack proves its caller got the
  -- reply.
  redis.call('HDEL', lease, id, record(prefix_of(token)))
  if holder then
    redis.call('HDEL', dedup, dedup_key)
  end
  return 1
end

-- ack_many acks the tasks given in ARGV[from..] as triples (id, lease
-- token, dedup key or ''), each as ack does, in a fixed number of commands
-- whatever their count: HMGET and ZMSCORE check them all, and one HDEL,
-- ZREM and HDEL end those that are the caller's (a worker acks the tasks
-- its slots finished together in one call). Returns one digit per task,
-- in order: '1' acked, '0' lease lost (that one is left as it is). The
-- reads refuse a wrong-type key before any write, as in ack.
local function ack_many(processing, body, lease, dedup, from)
  local ids = {}
  for i = from, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  local entries = redis.call('HMGET', lease, unpack(ids))
  local scores = redis.call('ZMSCORE', processing, unpack(ids))
  local res, done, fields, dkeys = {}, {}, {}, {}
  for j, id in ipairs(ids) do
    local token = ARGV[from + 3 * j - 2]
    if owned(entries[j], scores[j], token) then
      res[j] = '1'
      done[#done + 1] = id
      fields[#fields + 1] = id
      fields[#fields + 1] = record(prefix_of(token))
      local dk = ARGV[from + 3 * j - 1]
      if dk ~= '' and redis.call('HGET', dedup, dk) == id then
        dkeys[#dkeys + 1] = dk
      end
    else
      res[j] = '0'
    end
  end
  if #done > 0 then
    redis.call('HDEL', body, unpack(done))
    redis.call('ZREM', processing, unpack(done))
    redis.call('HDEL', lease, unpack(fields))
    if #dkeys > 0 then
      redis.call('HDEL', dedup, unpack(dkeys))
    end
  end
  return table.concat(res)
end

-- with_dead_at returns a dead-letter body (a JSON object that has no
-- "dead_at") with "dead_at" set to now, in unix seconds.
local function with_dead_at(body, ms)
  return string.sub(body, 1, -2) .. ',"dead_at":' .. secs(ms) .. '}'
end

-- policy returns the queue's stored policy (fleet:queue:<name>:policy, a
-- JSON object), or fallback when there is none or it does not decode.
local function policy(key, fallback)
  local raw = redis.call('GET', key)
  if not raw then return fallback end
  local ok, p = pcall(cjson.decode, raw)
  if not ok or type(p) ~= 'table' then return fallback end
  for k, v in pairs(fallback) do
    if type(p[k]) ~= 'number' then p[k] = v end
  end
  return p
end
