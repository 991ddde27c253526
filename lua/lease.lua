-- lease.lua: take or renew a named lease, handing out a fencing token.
-- One holder at a time; the token grows every time the lease changes hands,
-- so a repair by a holder that lost the lease is refused (see fence.lua).
--
-- KEYS[1] lease   string "<holder>|<fencing token>", expires after ttl
-- KEYS[2] counter string, the last fencing token handed out
-- ARGV[1] holder  ARGV[2] ttl ms  ARGV[3] counter ttl ms
--
-- Returns {held, token}:
--   {1, f}  the lease is holder's (taken now or renewed) under token f
--   {0, f}  another holder has it, under token f
-- The counter expires (ARGV[3]) like every key; when it is gone it restarts
-- from Redis' clock in ms, above any token handed out before as long as the
-- lease changes hands less than once per millisecond on average.
local v = redis.call('GET', KEYS[1])
if v then
  local h, f = string.match(v, '^(.*)|(%d+)$')
  if h == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(f)}
  end
  return {0, tonumber(f or '0')}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)))
end
local f = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. f, 'PX', ARGV[2])
return {1, f}
