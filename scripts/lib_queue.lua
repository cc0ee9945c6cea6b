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

-- ack_all acks the tasks given from ARGV[from]: first their count P, then
-- P plain acks as triples (id, lease token, dedup key or ''), then acks
-- that keep something as 7-tuples (id, token, dedup key, unique window ms
-- or '0', retention ms or '0', result JSON or '', attempts), the j-th of
-- which (from 1) has its unique key and its result key at
-- KEYS[keys + 2j - 2] and KEYS[keys + 2j - 1]. Each is acked when the reservation that exists now is
-- the caller's (owned): it leaves PROCESSING, BODY and LEASE, its dedup key
-- is freed when it still names the task (held on for its unique window
-- instead, when it has one), and its record is kept for the retention. The
-- plain ones take a fixed number of commands whatever their count (HMGET
-- and ZMSCORE check them all, one HDEL, ZREM and HDEL end them). Returns
-- one code per ack, in order (DONE or LOST), as a string of digits. The
-- reads refuse a wrong-type key before any write.
local function ack_all(from, keys)
  local plain = tonumber(ARGV[from])
  local res = {}
  if plain > 0 then
    local ids = {}
    for j = 1, plain do ids[j] = ARGV[from + 3 * j - 2] end
    local entries = redis.call('HMGET', LEASE, unpack(ids))
    local scores = redis.call('ZMSCORE', PROCESSING, unpack(ids))
    local done, fields, dkeys = {}, {}, {}
    for j, id in ipairs(ids) do
      local token = ARGV[from + 3 * j - 1]
      if owned(entries[j], scores[j], token) then
        res[j] = DONE
        done[#done + 1] = id
        fields[#fields + 1] = id
        fields[#fields + 1] = record(prefix_of(token))
        local dk = ARGV[from + 3 * j]
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
  for i = from + 1 + 3 * plain, #ARGV, 7 do
    j = j + 1
    local id, token, dk = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local code = LOST
    if owns(id, token) then
      code = DONE
      local holder = dk ~= '' and redis.call('HGET', DEDUP, dk) == id
      leave(id, token)
      if holder then
        redis.call('HDEL', DEDUP, dk)
        if tonumber(ARGV[i + 3]) > 0 then
          redis.call('SET', KEYS[keys + 2 * j - 2], id, 'PX', ARGV[i + 3])
        end
      end
      if tonumber(ARGV[i + 4]) > 0 then
        local result = ARGV[i + 5]
        if result == '' then result = 'null' end
        local worker = string.match(token, '^(.*)/[^/]*$') or ''
        redis.call('SET', KEYS[keys + 2 * j - 1], '{"id":' .. cjson.encode(id) .. ',"result":' .. result ..
          ',"attempts":' .. ARGV[i + 6] .. ',"done_at":' .. secs(now_ms()) .. ',"worker":' .. cjson.encode(worker) .. '}',
          'PX', ARGV[i + 4])
      end
    end
    res[plain + j] = code
  end
  return table.concat(res)
end
