-- limit_allow: take tokens from a GCRA limiter (the algorithm of redis-cell
-- and go-redis/redis_rate), on the server's clock.
-- KEYS[1]  fleet:limit:<name>  string: the theoretical arrival time (TAT),
--          server µs; TTL = until the limiter is full again
-- ARGV[1]  n, the tokens asked for (1 <= n <= burst)
-- ARGV[2]  the emission interval in µs: one token comes back every interval
-- ARGV[3]  burst: the most tokens that can go at once after a rest
-- ARGV[4]  the mode: '0' all n now or none; '1' as many as there are now,
--          up to n, else book one ahead; '2' all n now, else book n ahead.
--          A booked token is taken now (the arrival time moves) but may
--          only be used after retry_after: a caller that wakes late loses
--          nothing, and waiters line up instead of racing.
-- returns  {taken, remaining, retry_after_us, reset_after_us}: taken is
--          the tokens taken or booked (0: denied; then nothing changes);
--          remaining the tokens left now; retry_after_us -1 when taken for
--          now, else how long until the tokens asked (or booked) can be
--          used; reset_after_us how long until the limiter is full again.
--          A WRONGTYPE error, nothing changed, when the key holds another
--          type or a string that is no number.
local now = now_us()
local tat = gcra_tat(KEYS[1], now)
if not tat then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds no arrival time')
end
local n = tonumber(ARGV[1])
local iv = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local avail = gcra_avail(tat, now, iv, burst)
local take = n
if ARGV[4] == '1' and avail < n then take = avail end
if take < 1 or take > avail then
  local need = n
  if ARGV[4] == '1' then need = 1 end
  if ARGV[4] == '0' then
    return {0, avail, tat + (need - burst) * iv - now, tat - now}
  end
  local btat = tat + need * iv
  gcra_set(KEYS[1], btat, now)
  return {need, 0, btat - burst * iv - now, btat - now}
end
local ntat = tat + take * iv
gcra_set(KEYS[1], ntat, now)
return {take, avail - take, -1, ntat - now}
