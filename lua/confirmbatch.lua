-- confirmbatch.lua: confirm.lua for many reservations of one SKU's shard
-- at once (winners' confirms gathered after their answers, issue 10): each
-- pending (or queued) one -> confirmed, once; the counters and the pending
-- index are updated once for the whole batch.
--
-- KEYS[1] stock  KEYS[2] res  KEYS[3] pending   (see reserve.lua)
-- ARGV    pairs: token id, order id ("" when unknown), ...
--
-- Returns one code per pair, in order (as confirm.lua's):
--   1 OK: confirmed now   6 SAME: already confirmed (or named twice)
--   7 RELEASED: released before; nothing changed   8 UNKNOWN: no such reservation
-- One HMGET for the records, no table per reservation, a state read by its
-- first byte and the confirmed record made from the pending one's
-- "|user|qty|ms|" (issue 10: in Redis's Lua each redis.call, table,
-- tonumber and capture costs about as much as a field read).
local n = #ARGV / 2
if n < 1 then return {} end
local ids = {}
for k = 1, n do ids[k] = ARGV[2 * k - 1] end
local recs = redis.call('HMGET', KEYS[2], unpack(ids))
local byte, match = string.byte, string.match
local codes, fv, done, seen, nf, nd, units = {}, {}, {}, {}, 0, 0, 0
local nums = {}
for k = 1, n do
  local id = ids[k]
  local code = 6
  if not seen[id] then
    seen[id] = true
    local rec = recs[k]
    if not rec then
      code = 8
    else
      local st = byte(rec, 1)
      if st == 120 then -- x
        code = 7
      elseif st ~= 99 then -- not c: p or q
        local mid, qs = match(rec, '^%a(|[^|]*|(%d+)|%d*|)')
        local q = nums[qs]
        if not q then q = tonumber(qs); nums[qs] = q end
        units = units + q
        fv[nf + 1], fv[nf + 2] = id, 'c' .. mid .. ARGV[2 * k] .. '|'
        nf = nf + 2
        nd = nd + 1
        done[nd] = id
        code = 1
      end
    end
  end
  codes[k] = code
end
if nd > 0 then
  redis.call('HINCRBY', KEYS[1], 'p', -units)
  redis.call('HINCRBY', KEYS[1], 'c', units)
  redis.call('HSET', KEYS[2], unpack(fv))
  redis.call('ZREM', KEYS[3], unpack(done))
end
return codes
