-- repeat.lua: a repeat of a request (same user, same request id) answered by the
-- reservation its first copy got, as reserve.lua's repeat branch answers it, with
-- nothing reserved: admission asks it where a new request could only be refused
-- (after the activity's end), so a winner whose answer was lost hears its outcome.
--
-- KEYS[1] rid: the request id's record (reserve.lua KEYS[9])  KEYS[2] res of the home shard
-- (no ARGV)
--
-- Returns:
--   {0}                          no record, or it names another request's
--                                reservation that was given back (reserve.lua
--                                decides those afresh): not a repeat to answer
--   {3, token id}                PENDING: pending or queued
--   {4, token id, order id[, replay]}  PURCHASED: confirmed (replay: the shop's
--                                answer kept with the request id)
--   {7, token id}                RELEASED: the request's own reservation was released
local seen = redis.call('GET', KEYS[1])
if not seen then return {0} end
local last = string.sub(seen, (string.find(seen, '|', 1, true) or 0) + 1)
local replay = ''
local sep = string.find(last, '|', 1, true)
if sep then
  last, replay = string.sub(last, 1, sep - 1), string.sub(last, sep + 1)
end
local rec = redis.call('HGET', KEYS[2], last)
local st = rec and string.sub(rec, 1, 1) or 'p'
if st == 'p' or st == 'q' then return {3, last} end
if st == 'x' then
  if string.sub(seen, 1, 2) ~= '3|' then return {7, last} end
  return {0}
end
local oid = string.match(rec, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or ''
if replay ~= '' then return {4, last, oid, replay} end
return {4, last, oid}
