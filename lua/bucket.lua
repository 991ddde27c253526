-- bucket.lua: a token bucket shared by the whole fleet, on Redis' clock (no
-- skew between instances). Queue-mode forwarding takes its tokens here, so
-- queue.rate bounds what the shop receives from all instances together.
-- Amounts are in micro-tokens so fractional rates stay integers.
--
-- KEYS[1] bucket hash  t = micro-tokens left, ms = last refill (Redis clock)
-- ARGV[1] refill, micro-tokens per ms (= rate per second * 1000)
-- ARGV[2] capacity, micro-tokens  ARGV[3] tokens wanted  ARGV[4] ttl ms
--
-- Returns {granted, wait ms}: granted in 0..wanted whole tokens; when 0,
-- wait ms is how long until one token is there.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local rate, cap, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 't', 'ms')
local t, last = tonumber(st[1]), tonumber(st[2])
if not t then
  t, last = cap, ms
end
if ms > last then
  t = math.min(cap, t + (ms - last) * rate)
  last = ms
end
local n = math.min(want, math.floor(t / 1000000))
t = t - n * 1000000
redis.call('HSET', KEYS[1], 't', string.format('%d', t), 'ms', string.format('%d', last))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local wait = 0
if n == 0 then
  wait = math.ceil((1000000 - t) / rate)
end
return {n, wait}
