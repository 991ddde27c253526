-- confirm.lua: pending -> confirmed, once. Replays are harmless. A queued
-- (not yet sent) reservation is confirmed too: only an order the shop holds
-- confirms, so it was sent after all; its stream entry is then skipped.
--
-- KEYS[1] stock  KEYS[2] res  KEYS[3] pending   (see reserve.lua)
-- ARGV[1] token id  ARGV[2] order id ("" when unknown)
--
-- Returns {code}:
--   {1}  OK: confirmed now
--   {6}  SAME: already confirmed (nothing changed)
--   {7}  RELEASED: the reservation was released before; nothing changed
--   {8}  UNKNOWN: no such reservation
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {8}
end
local state, user, qty, ms = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|')
if state == 'c' then
  return {6}
end
if state == 'x' then
  return {7}
end
qty = tonumber(qty)
redis.call('HINCRBY', KEYS[1], 'p', -qty)
redis.call('HINCRBY', KEYS[1], 'c', qty)
redis.call('HSET', KEYS[2], ARGV[1], 'c|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. ARGV[2] .. '|')
redis.call('ZREM', KEYS[3], ARGV[1])
return {1}
