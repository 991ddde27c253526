-- inflight.lua: one proxy instance's share of an activity's budget of
-- winners in flight to the shop (upstream.max_inflight), for the whole
-- fleet. Each instance holds a number of slots under a lease; the sum of
-- what the live instances hold never exceeds the limit, and the slots of an
-- instance that stops calling (crashed, cut off) come back when its lease
-- expires (Redis clock, so no skew between instances).
--
-- KEYS[1] hash  "h:<instance>" -> slots held, "d:<instance>" -> demand
--               (in use + waiting), "lim" -> the limit in force
--               (upstream.adaptive: the latest estimate any instance made)
-- KEYS[2] zset  instance -> its lease's expiry, ms
-- ARGV[1] instance id
-- ARGV[2] floor: slots the instance may have in use right now; never
--         taken from it, whatever the limit (a request sent stays sent)
-- ARGV[3] want: slots the instance asks to hold in all (>= floor)
-- ARGV[4] demand: slots it would use if it could (for the fair share)
-- ARGV[5] limit  ARGV[6] "1" = make ARGV[5] the limit in force;
--         "0" = keep the stored one (ARGV[5] when none is stored)
-- ARGV[7] lease ttl ms  ARGV[8] how long the keys outlive the last call, ms
--
-- Returns {held, fair, total, limit}: the slots the instance holds now,
-- max(floor, min(want, limit - what the others hold, fair)); its fair share
-- (the limit water-filled over the live instances' demands, so an instance
-- never takes what the others are waiting for beyond its share); the slots
-- the fleet holds; and the limit in force.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, i in ipairs(dead) do
  redis.call('HDEL', KEYS[1], 'h:' .. i, 'd:' .. i)
  redis.call('ZREM', KEYS[2], i)
end
local me = ARGV[1]
local lim = tonumber(ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'lim', ARGV[5])
else
  lim = tonumber(redis.call('HGET', KEYS[1], 'lim') or ARGV[5])
end
local floor, want, demand = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local others = 0
local demands = {}
local kv = redis.call('HGETALL', KEYS[1])
for j = 1, #kv, 2 do
  local f = kv[j]
  local kind, inst = string.sub(f, 1, 2), string.sub(f, 3)
  if inst ~= me then
    if kind == 'h:' then
      others = others + tonumber(kv[j + 1])
    elseif kind == 'd:' then
      local d = tonumber(kv[j + 1])
      if d > 0 then demands[#demands + 1] = d end
    end
  end
end
-- Water-filling: instances demanding less than an equal share keep their
-- demand; the rest split what is left equally (rounded up).
local fair = demand
if demand > 0 then
  demands[#demands + 1] = demand
  table.sort(demands)
  local left, n = lim, #demands
  for j = 1, n do
    local share = left / (n - j + 1)
    if demands[j] > share then
      fair = math.min(demand, math.ceil(share))
      break
    end
    left = left - demands[j]
  end
end
local held = math.max(floor, math.min(want, lim - others, fair))
if held == 0 and demand == 0 then
  redis.call('HDEL', KEYS[1], 'h:' .. me, 'd:' .. me)
  redis.call('ZREM', KEYS[2], me)
else
  redis.call('HSET', KEYS[1], 'h:' .. me, held, 'd:' .. me, demand)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), me)
end
redis.call('PEXPIRE', KEYS[1], ARGV[8])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[8]) end
return {held, fair, others + held, lim}
