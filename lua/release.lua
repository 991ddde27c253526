-- release.lua: pending (or queued) -> released or confirmed -> released, once; the units
-- go back on the shelf and the buyer may buy again within their limit.
-- Never lifts remaining above what the shard's invariant allows.
--
-- KEYS[1] stock  KEYS[2] users  KEYS[3] res  KEYS[4] pending  KEYS[5] out
-- KEYS[6] epoch  (incremented when a buyer's units go down; see reserve.lua KEYS[6])
-- ARGV[1] token id  ARGV[2] reason  ARGV[3] now ms (kept on the record as the
--         release time: "x|<user>|<qty>|<ms>|<order id>|<reason>|<released ms>")
-- ARGV[4] "1" = only release a pending reservation (the shop said no, or verify
--         proved the order absent): never a queued one, which the shop has not
--         seen yet; "0" = also a queued or confirmed one (operator: refund,
--         cancel; a queued one is then never sent, see claim.lua);
--         "u" = only a queued reservation with no stream entry (an orphan:
--         the reconciler's repair, see store.ReleaseOrphans): one enqueued,
--         sent or settled since its caller read it is left alone (LISTED)
-- ARGV[5] "" = no condition; else the send stamp (the record's <ms>) the
--         caller judged the reservation by: a pending one re-stamped since
--         (a queue worker's takeover claimed it and sent it again, see
--         claim.lua's SAME) is left alone, its new send unsettled yet.
--         Always sent (possibly "") so a fence's trailing ARGV never stand here.
--
-- Returns {code, remaining}:
--   {1, r}  OK: released now
--   {6, r}  SAME: already released (nothing changed)
--   {8, 0}  UNKNOWN: no such reservation
--   {9, r}  CONFIRMED: pending-only release of a confirmed reservation refused
--   {10, r} BROKEN: stock counters would break the invariant; nothing changed
--   {13, r} NOT_SENT: pending-only release of a queued (not yet sent) one refused
--   {16, r} RESTAMPED: pending, but sent again since the stamp in ARGV[5]; nothing changed
--   {17, r} LISTED: orphan release ("u") of a reservation that is no longer queued
--           without a stream entry; nothing changed
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return {8, 0}
end
local state, user, qty, ms, oid = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|([^|]*)')
local st = redis.call('HMGET', KEYS[1], 'r', 'i', 'p', 'c')
local r, i, p, c = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
if state == 'x' then
  return {6, r}
end
if ARGV[4] == 'u' and (state ~= 'q' or string.sub(rec, -1) ~= '|') then
  return {17, r}
end
if state == 'c' and ARGV[4] == '1' then
  return {9, r}
end
if state == 'q' and ARGV[4] == '1' then
  return {13, r}
end
if state == 'p' and ARGV[5] and ARGV[5] ~= '' and ms ~= ARGV[5] then
  return {16, r}
end
qty = tonumber(qty)
local from = 'p'
if state == 'c' then from = 'c' end
if (from == 'p' and p < qty) or (from == 'c' and c < qty) or r + p + c > i then
  return {10, r}
end
if state == 'q' and string.sub(rec, -1) == '|' then
  -- Queued with no stream entry yet (reserve.lua's u): none will come.
  if redis.call('HINCRBY', KEYS[1], 'u', -1) < 0 then redis.call('HSET', KEYS[1], 'u', 0) end
end
redis.call('HINCRBY', KEYS[1], from, -qty)
redis.call('HINCRBY', KEYS[1], 'x', qty)
r = redis.call('HINCRBY', KEYS[1], 'r', qty)
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[3], ARGV[1], 'x|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. oid .. '|' .. ARGV[2] .. '|' .. ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[1])
giveBack(KEYS[2], KEYS[6], user, qty, ARGV[1])
return {1, r}
