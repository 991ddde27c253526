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
-- A new token is the greater of the counter + 1 and Redis' clock in ms, so
-- the counter never trails the clock: when it is gone (it expires, ARGV[3],
-- like every key) or set back (a failover lost its last increments with the
-- old master: the replica promoted holds an older value), the next token is
-- still above every one handed out before, as long as the lease changed
-- hands less than once per millisecond on average and the new master's clock
-- is not behind the old one's by more than the failover took (red team
-- chaosfo, docs/decisions.md §60: a plain INCR handed the last holder's
-- token out again).
local v = redis.call('GET', KEYS[1])
if v then
  local h, f = string.match(v, '^(.*)|(%d+)$')
  if h == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(f)}
  end
  return {0, tonumber(f or '0')}
end
local t = redis.call('TIME')
local f = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. f, 'PX', ARGV[2])
return {1, f}
