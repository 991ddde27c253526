-- steal.lua: move units out of a donor shard towards a buyer's dry home shard.
-- The move is recorded on the donor until the home shard has deposited it
-- (reserve.lua with the same move id), so a crash between the two steps is
-- finished by the reconciler, never lost.
--
-- KEYS[1] stock  hash of the donor shard (see reserve.lua)
-- KEYS[2] moves  hash  move id -> "<home shard>|<units>|<ms>|<generation>"
--                (home -1: a tombstone left by settlemove.lua)
-- KEYS[3] out    string, exists while r == 0
-- ARGV[1] units needed  ARGV[2] move id  ARGV[3] home shard index
-- ARGV[4] now ms  ARGV[5] expire-at ms
--
-- Returns {code, units moved, ...}:
--   {1, k, g} OK: k units (>= 1) of stock generation g left the donor
--   {2, 0}    EMPTY: donor has nothing to give
--   {5, 0}    NOT_READY: donor shard was never preheated
--   {14, 0}   ABORTED: settlemove.lua settled this move id first; nothing taken
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {14, 0}
end
local r = redis.call('HGET', KEYS[1], 'r')
if not r then
  return {5, 0}
end
r = tonumber(r)
if r <= 0 then
  return {2, 0}
end
-- Exactly what the buyer needs (at most what the donor has). Moving more —
-- half the donor, as this script did until issue 10's fifth round — left
-- the surplus on the buyer's home shard after the other buyers of that shard,
-- told EMPTY together, had found the donors dry and heard SOLD_OUT: units
-- nobody was offered (store TestNoUnitLeftWhenAllAnswered). With exact moves
-- a shard's r only goes down during a sale (releases aside), so a buyer who
-- found every shard dry was right.
local k = tonumber(ARGV[1])
if k > r then k = r end
redis.call('HINCRBY', KEYS[1], 'i', -k)
r = redis.call('HINCRBY', KEYS[1], 'r', -k)
if r == 0 then redis.call('SET', KEYS[3], '1', 'PXAT', ARGV[5]) end
local g = redis.call('HGET', KEYS[1], 'g') or '0'
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. '|' .. k .. '|' .. ARGV[4] .. '|' .. g)
if redis.call('HLEN', KEYS[2]) == 1 then redis.call('PEXPIREAT', KEYS[2], ARGV[5]) end
return {1, k, tonumber(g)}
