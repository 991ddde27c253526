-- deposit.lua: finish a stock move whose reserve step never ran (the proxy
-- died or timed out between steal.lua and reserve.lua). Idempotent by move id,
-- shared with reserve.lua's own deposit, so a move lands exactly once.
--
-- KEYS[1] stock  KEYS[2] out  KEYS[3] movesin   (home shard, see reserve.lua)
-- ARGV[1] move id  ARGV[2] units  ARGV[3] expire-at ms
-- ARGV[4] stock generation of the units (the move record's; "" or absent = unchecked)
--
-- Returns {code}:
--   {1}  OK: deposited now
--   {6}  SAME: deposited before; nothing changed
--   {5}  NOT_READY: the home shard does not exist (expired or never preheated)
--   {15} STALE: the units belong to another preheat of the stock; nothing changed
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {5}
end
if ARGV[4] and ARGV[4] ~= '' and (redis.call('HGET', KEYS[1], 'g') or '0') ~= ARGV[4] then
  return {15}
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return {6}
end
local k = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'i', k)
local r = redis.call('HINCRBY', KEYS[1], 'r', k)
if r > 0 then redis.call('DEL', KEYS[2]) end
if redis.call('SCARD', KEYS[3]) == 1 then redis.call('PEXPIREAT', KEYS[3], ARGV[3]) end
return {1}
