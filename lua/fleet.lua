-- fleet.lua: one instance's heartbeat in the fleet's roll call, on Redis'
-- clock (no skew between instances). Each instance shares the per-IP,
-- per-device and per-user limits by the count it gets back. The set stays
-- bounded: members not seen for stale ms are dropped on every beat, and
-- the key expires when no instance beats any more.
--
-- KEYS[1] zset   instance id -> last heartbeat ms (Redis clock)
-- ARGV[1] this instance's id
-- ARGV[2] stale, ms: members whose last beat is older are dropped
-- ARGV[3] ttl of the key, ms
--
-- Returns the number of live instances, this one included (>= 1).
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', ms - tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('ZCARD', KEYS[1])
