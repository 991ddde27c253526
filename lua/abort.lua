-- abort.lua: settle, by its token id, a reserve whose reply never came (the
-- call timed out or its connection broke: the script may have run late, or
-- may still run), so a buyer told STORE_UNAVAILABLE holds nothing. A late
-- reservation is released; if there is none yet, a tombstone (a released
-- record of 0 units) makes reserve.lua take nothing for that token id.
-- Units the reserve call carried from a donor shard are deposited here
-- first, as reserve.lua would have (idempotent by move id), unless they
-- belong to an older preheat of the stock.
--
-- KEYS[1] stock  KEYS[2] users  KEYS[3] res  KEYS[4] pending  KEYS[5] out
-- KEYS[6] movesin  KEYS[7] epoch (incremented when a buyer's units go down;
--         see reserve.lua KEYS[6])
-- KEYS[8] rid (optional: the aborted request's request id
--         record, deleted when it names this token, so a repeat is decided afresh)
-- ARGV[1] token id  ARGV[2] user  ARGV[3] reason  ARGV[4] now ms
-- ARGV[5] units moved in ("0" = none)  ARGV[6] move id ("" = none)
-- ARGV[7] stock generation of the moved units  ARGV[8] expire-at ms
-- ARGV[9] "1" = queue mode: a queued record ('q', never sent) is released;
--         a pending one ('p') was claimed by a worker and is at the shop,
--         so it is left alone. Sync mode: the pending record is released
--         (the proxy gave up on the call, nothing was forwarded).
--
-- Returns {code}:
--   {1}   OK: the late reservation was released
--   {14}  ABORTED: no reservation yet; the tombstone stops it
--   {6}   SAME: released or aborted before; nothing changed
--   {9}   CONFIRMED: confirmed, or (queue mode) claimed by a worker and sent; left alone
--   {10}  BROKEN: stock counters would break the invariant; nothing released
if ARGV[6] ~= '' and redis.call('EXISTS', KEYS[1]) == 1
    and (redis.call('HGET', KEYS[1], 'g') or '0') == ARGV[7]
    and redis.call('SADD', KEYS[6], ARGV[6]) == 1 then
  local k = tonumber(ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'i', k)
  if redis.call('HINCRBY', KEYS[1], 'r', k) > 0 then redis.call('DEL', KEYS[5]) end
  if redis.call('SCARD', KEYS[6]) == 1 then redis.call('PEXPIREAT', KEYS[6], ARGV[8]) end
end
local rid = KEYS[8]
if rid then
  local seen = redis.call('GET', rid)
  if seen and string.match(seen, '^%d+|([^|]*)') == ARGV[1] then redis.call('DEL', rid) end
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  redis.call('HSET', KEYS[3], ARGV[1], 'x|' .. ARGV[2] .. '|0|' .. ARGV[4] .. '||' .. ARGV[3] .. '|' .. ARGV[4])
  if redis.call('HLEN', KEYS[3]) == 1 then redis.call('PEXPIREAT', KEYS[3], ARGV[8]) end
  return {14}
end
local state, user, qty, ms, oid = string.match(rec, '^(%a)|([^|]*)|(%d+)|(%d*)|([^|]*)')
if state == 'x' then
  return {6}
end
if (ARGV[9] == '1' and state ~= 'q') or (ARGV[9] ~= '1' and state ~= 'p') then
  return {9}
end
qty = tonumber(qty)
local st = redis.call('HMGET', KEYS[1], 'r', 'i', 'p', 'c')
local r, i, p, c = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
if not r or p < qty or r + p + c > i then
  return {10}
end
if state == 'q' and string.sub(rec, -1) == '|' then
  -- Queued with no stream entry yet (reserve.lua's u): none will come.
  if redis.call('HINCRBY', KEYS[1], 'u', -1) < 0 then redis.call('HSET', KEYS[1], 'u', 0) end
end
redis.call('HINCRBY', KEYS[1], 'p', -qty)
redis.call('HINCRBY', KEYS[1], 'x', qty)
redis.call('HINCRBY', KEYS[1], 'r', qty)
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[3], ARGV[1], 'x|' .. user .. '|' .. qty .. '|' .. ms .. '|' .. oid .. '|' .. ARGV[3] .. '|' .. ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[1])
giveBack(KEYS[2], KEYS[7], user, qty, ARGV[1])
return {1}
