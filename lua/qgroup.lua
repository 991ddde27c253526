-- qgroup.lua: make sure a shard's reservation stream has the queue-mode
-- consumer group, and that the stream expires with the activity (MKSTREAM
-- creates it without a TTL). Idempotent.
--
-- KEYS[1] log stream (see reserve.lua)
-- ARGV[1] group name  ARGV[2] expire-at ms
--
-- Returns {1} (created now) or {6} (the group existed).
local code = 1
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(ok) == 'table' and ok.err then
  if not string.find(ok.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(ok.err)
  end
  code = 6
end
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return {code}
