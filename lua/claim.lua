-- claim.lua: a queue-mode worker claims a reservation just before it calls
-- the shop: queued -> pending, once, stamping the send time into the record
-- and the pending index, so the reconciler's pending_timeout counts from the
-- send and a reservation released meanwhile (operator, abort) is never sent.
--
-- KEYS[1] res  KEYS[2] pending   (see reserve.lua)
-- ARGV[1] token id  ARGV[2] now ms (proxy clock: the send time)
-- ARGV[3] expire-at ms (for a pending index this creates)
--
-- Returns {code}:
--   {1}  OK: was queued, now pending since now: send it
--   {6}  SAME: already pending (a redelivered entry: the worker that claimed
--        it died); re-stamped with now: send again with the same token (the
--        shop dedups by it) or settle by verify
--   {7}  RELEASED: released before its turn: do not send
--   {9}  CONFIRMED: already confirmed: do not send
--   {8}  UNKNOWN: no such reservation: do not send
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then
  return {8}
end
local state, user, qty, oid = string.match(rec, '^(%a)|([^|]*)|(%d+)|%d*|([^|]*)')
if state == 'x' then
  return {7}
end
if state == 'c' then
  return {9}
end
local code = 1
if state == 'p' then code = 6 end
redis.call('HSET', KEYS[1], ARGV[1], 'p|' .. user .. '|' .. qty .. '|' .. ARGV[2] .. '|' .. oid .. '|')
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
if redis.call('ZCARD', KEYS[2]) == 1 then redis.call('PEXPIREAT', KEYS[2], ARGV[3]) end
return {code}
