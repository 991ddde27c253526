-- batch-winners.lua: MEASUREMENT ONLY (scripts/redis-micro.sh), not used by the proxy.
-- N new buyers reserved in one call, as a batched reserve.lua would for the
-- common call (sync mode, no deposit, no request id): how much Redis CPU per
-- winner one script call per batch would save against one per winner.
-- KEYS as reserve.lua's short call; ARGV: limit, now ms, expire-at ms, then
-- pairs of user, token id. Returns one code per buyer (1 OK, 2 EMPTY, 4 held,
-- 14 tombstoned).
local n = (#ARGV - 3) / 2
local users, toks = {}, {}
for i = 1, n do users[i] = ARGV[2 + 2 * i]; toks[i] = ARGV[3 + 2 * i] end
local held = redis.call('HMGET', KEYS[2], unpack(users))
local tomb = redis.call('HMGET', KEYS[3], unpack(toks))
local r = tonumber(redis.call('HGET', KEYS[1], 'r'))
local out, uv, rv, zv, won, seen = {}, {}, {}, {}, 0, {}
for i = 1, n do
  if held[i] or seen[users[i]] then out[i] = 4
  elseif tomb[i] then out[i] = 14
  elseif r - won < 1 then out[i] = 2
  else
    seen[users[i]] = true
    won = won + 1
    out[i] = 1
    uv[#uv + 1] = users[i]; uv[#uv + 1] = '1|' .. toks[i]
    rv[#rv + 1] = toks[i]; rv[#rv + 1] = 'p|' .. users[i] .. '|1|' .. ARGV[2] .. '||'
    zv[#zv + 1] = ARGV[2]; zv[#zv + 1] = toks[i]
  end
end
if won > 0 then
  redis.call('HSET', KEYS[3], unpack(rv))
  redis.call('HINCRBY', KEYS[1], 'r', -won)
  redis.call('HINCRBY', KEYS[1], 'p', won)
  redis.call('HSET', KEYS[2], unpack(uv))
  redis.call('ZADD', KEYS[4], unpack(zv))
  if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIREAT', KEYS[2], ARGV[3]) end
  if redis.call('PTTL', KEYS[4]) == -1 then redis.call('PEXPIREAT', KEYS[4], ARGV[3]) end
end
return out
