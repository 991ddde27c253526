-- bundlerelease.lua: release.lua (and abort.lua) for a bundle reservation
-- (bundle.lua): every item's units go back on the shelf in one step, or
-- none do; the buyer's units go down by the bundle's total.
--
-- KEYS[1] users  KEYS[2] res  KEYS[3] pending  KEYS[4] epoch  (see reserve.lua)
-- then per item i (1..n): KEYS[3+2i] stock of its SKU, KEYS[4+2i] out of its SKU
-- ARGV[1] token field ("*:<id>")  ARGV[2] reason  ARGV[3] now ms
-- ARGV[4] "1" = only release a pending reservation (see release.lua)
-- ARGV[5] items "<sku>:<qty>,..." as the caller read them from "<field>:i",
--         in the order of the KEYS (a mismatch changes nothing: BROKEN)
-- ARGV[6] "1" = abort mode (abort.lua's part): the proxy gave up on the
--         bundle.lua call; with no record yet, a tombstone (a released
--         record of 0 units) makes bundle.lua take nothing; a record that
--         is not pending is left alone (CONFIRMED)
-- ARGV[7] user (abort mode: named on the tombstone)  ARGV[8] expire-at ms (abort mode)
-- (fenced: the shard's fence key and lua/fence.lua's ARGV follow)
--
-- Returns {code}:
--   {1}  OK: released now          {6}  SAME: already released
--   {8}  UNKNOWN: no such reservation (not abort mode)
--   {9}  CONFIRMED: pending-only (or abort) release of a confirmed one refused
--   {10} BROKEN: counters would break the invariant, or items mismatch; nothing changed
--   {13} NOT_SENT: pending-only release of a queued one refused
--   {14} ABORTED: abort mode, no reservation yet; the tombstone stops it
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[2], ARGV[1], 'x|' .. ARGV[7] .. '|0|' .. ARGV[3] .. '||' .. ARGV[2] .. '|' .. ARGV[3])
    if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIREAT', KEYS[2], ARGV[8]) end
    return {14}
  end
  return {8}
end
local state, user, qty, ms, oid = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|([^|]*)')
if state == 'x' then return {6} end
if (ARGV[4] == '1' or ARGV[6] == '1') and state == 'c' then return {9} end
if ARGV[4] == '1' and state == 'q' then return {13} end
if redis.call('HGET', KEYS[2], ARGV[1] .. ':i') ~= ARGV[5] then return {10} end
local from = 'p'
if state == 'c' then from = 'c' end
local qs, i = {}, 0
for _, q in string.gmatch(ARGV[5], '([^:,]+):(%d+)') do
  i = i + 1
  qs[i] = tonumber(q)
end
for j = 1, i do
  local st = redis.call('HMGET', KEYS[3 + 2 * j], 'r', 'i', 'p', 'c')
  local r, ini, p, c = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
  if not r or (from == 'p' and p < qs[j]) or (from == 'c' and c < qs[j]) or r + p + c > ini then
    return {10}
  end
end
for j = 1, i do
  local stock = KEYS[3 + 2 * j]
  redis.call('HINCRBY', stock, from, -qs[j])
  redis.call('HINCRBY', stock, 'x', qs[j])
  redis.call('HINCRBY', stock, 'r', qs[j])
  redis.call('DEL', KEYS[4 + 2 * j])
end
qty = tonumber(qty)
redis.call('HSET', KEYS[2], ARGV[1], 'x|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. oid .. '|' .. ARGV[2] .. '|' .. ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[1])
giveBack(KEYS[1], KEYS[4], user, qty, ARGV[1])
return {1}
