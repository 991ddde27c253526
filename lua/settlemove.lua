-- settlemove.lua: on the donor shard, settle by its move id a steal whose
-- reply never came (the call timed out or its connection broke). If the
-- steal ran, its record says where the units go (the caller deposits them
-- with deposit.lua, then forgets the record); if it has not run, a
-- tombstone makes steal.lua take nothing for that move id.
--
-- KEYS[1] moves  hash of the donor shard (see steal.lua)
-- ARGV[1] move id  ARGV[2] now ms  ARGV[3] expire-at ms
--
-- Returns:
--   {1, home, units, generation}  OK: the steal ran; deposit on home
--   {14}                          ABORTED: it had not run; the tombstone stops it
--   {6}                           SAME: aborted before
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  -- Home -1 marks a tombstone; the reconciler forgets it after a while.
  redis.call('HSET', KEYS[1], ARGV[1], '-1|0|' .. ARGV[2] .. '|0')
  if redis.call('HLEN', KEYS[1]) == 1 then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
  return {14}
end
local home, k, ms, g = string.match(v, '^(-?%d+)|(%d+)|(%d*)|?(%d*)$')
if home == '-1' then
  return {6}
end
return {1, tonumber(home), tonumber(k), tonumber(g) or 0}
