-- fence.lua: a guard prepended (in Go, see embed.go) to confirm.lua,
-- release.lua and deposit.lua when the reconciler repairs under its lease.
-- It makes a repair by a reconciler that lost its lease (paused, partitioned)
-- harmless: each shard remembers the highest fencing token it has seen, and
-- refuses repairs carrying an older one. The guarded script's own KEYS and
-- ARGV come first and are unchanged; the guard reads the last ones:
--
-- KEYS[#KEYS]   fence   string  highest fencing token seen by this shard
-- ARGV[#ARGV-1] fencing token (from the lease, monotonically increasing)
-- ARGV[#ARGV]   expire-at ms of the fence key (the activity's key expiry)
--
-- Returns {11} FENCED (a newer lease holder has repaired here; nothing
-- changed), else falls through to the guarded script.
do
  local mine = tonumber(ARGV[#ARGV - 1])
  local seen = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
  if mine < seen then
    return {11}
  end
  if mine > seen then
    redis.call('SET', KEYS[#KEYS], ARGV[#ARGV - 1], 'PXAT', ARGV[#ARGV])
  end
end
