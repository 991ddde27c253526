-- bundleconfirm.lua: confirm.lua for a bundle reservation (bundle.lua):
-- pending (or queued) -> confirmed for every item at once. Replays are harmless.
--
-- KEYS[1] res  KEYS[2] pending  (see reserve.lua)
-- then per item i (1..n): KEYS[2+i] stock of its SKU
-- ARGV[1] token field ("*:<id>")  ARGV[2] order id ("" when unknown)
-- ARGV[3] items "<sku>:<qty>,..." as the caller read them from "<field>:i",
--         in the order of the KEYS (a mismatch changes nothing: BROKEN)
-- (fenced: the shard's fence key and lua/fence.lua's ARGV follow)
--
-- Returns {code}:
--   {1}  OK: confirmed now     {6}  SAME: already confirmed
--   {7}  RELEASED: released before; nothing changed
--   {8}  UNKNOWN: no such reservation
--   {10} BROKEN: the items do not match the record's; nothing changed
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return {8} end
local state, user, qty, ms = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|')
if state == 'x' then return {7} end
if state == 'c' then return {6} end
if redis.call('HGET', KEYS[1], ARGV[1] .. ':i') ~= ARGV[3] then return {10} end
local i = 0
for _, q in string.gmatch(ARGV[3], '([^:,]+):(%d+)') do
  i = i + 1
  redis.call('HINCRBY', KEYS[2 + i], 'p', -tonumber(q))
  redis.call('HINCRBY', KEYS[2 + i], 'c', tonumber(q))
end
redis.call('HSET', KEYS[1], ARGV[1], 'c|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. ARGV[2] .. '|')
redis.call('ZREM', KEYS[2], ARGV[1])
return {1}
