-- confirm.lua: pending -> confirmed, once. Replays are harmless. A queued
-- (not yet sent) reservation is confirmed too: only an order the shop holds
-- confirms, so it was sent after all; its stream entry is then skipped.
-- Optionally keeps the shop's answer with the winner's request id, in the
-- same step, so an exact repeat of the request never reads a state older
-- than the confirm (reserve.lua's request-id branch hands it back).
--
-- KEYS[1] stock  KEYS[2] res  KEYS[3] pending   (see reserve.lua)
-- KEYS[4] rid    (read only when ARGV[3] is not ""; see reserve.lua KEYS[8])
-- ARGV[1] token id  ARGV[2] order id ("" when unknown)
-- ARGV[3] replay "<status>|<content-type>|<content-encoding>|<body>" ("" = none)
--
-- The replay is written into the request-id record (keeping its TTL) only
-- while that record still names this token: "<code>|<token id>|<replay>".
--
-- Returns {code}:
--   {1}  OK: confirmed now
--   {6}  SAME: already confirmed (nothing changed but the replay)
--   {7}  RELEASED: the reservation was released before; nothing changed
--   {8}  UNKNOWN: no such reservation
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {8}
end
local state, user, qty, ms = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|')
if state == 'x' then
  return {7}
end
local code = 6
if state ~= 'c' then
  qty = tonumber(qty)
  redis.call('HINCRBY', KEYS[1], 'p', -qty)
  redis.call('HINCRBY', KEYS[1], 'c', qty)
  redis.call('HSET', KEYS[2], ARGV[1], 'c|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. ARGV[2] .. '|')
  redis.call('ZREM', KEYS[3], ARGV[1])
  code = 1
end
if ARGV[3] and ARGV[3] ~= '' then
  local seen = redis.call('GET', KEYS[4])
  if seen then
    local c, last = string.match(seen, '^(%d+)|([^|]*)')
    if last == ARGV[1] then
      redis.call('SET', KEYS[4], c .. '|' .. last .. '|' .. ARGV[3], 'KEEPTTL')
    end
  end
end
return {code}
