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
local codes, fv, ids, seen, n = {}, {}, {}, {}, 0
for i = 1, #ARGV - 1, 2 do
  local id = ARGV[i]
  local code = 6
  if not seen[id] then
    seen[id] = true
    local rec = redis.call('HGET', KEYS[2], id)
    if not rec then
      code = 8
    else
      local state, user, qty, ms = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|')
      if state == 'x' then
        code = 7
      elseif state ~= 'c' then
        n = n + tonumber(qty)
        fv[#fv + 1] = id
        fv[#fv + 1] = 'c|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. ARGV[i + 1] .. '|'
        ids[#ids + 1] = id
        code = 1
      end
    end
  end
  codes[#codes + 1] = code
end
if #ids > 0 then
  redis.call('HINCRBY', KEYS[1], 'p', -n)
  redis.call('HINCRBY', KEYS[1], 'c', n)
  redis.call('HSET', KEYS[2], unpack(fv))
  redis.call('ZREM', KEYS[3], unpack(ids))
end
return codes
