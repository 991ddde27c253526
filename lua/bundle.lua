-- bundle.lua: reserve every item of a bundle (several SKUs of one activity)
-- for one buyer on the buyer's home shard, all or none (seed 002 §4.3:
-- multi-SKU deduction with rollback: here nothing is taken before every
-- item is known to fit, so there is nothing to roll back). It mirrors
-- reserve.lua: the per-user limit counts every unit in the users hash,
-- a tombstone left by the abort (bundlerelease.lua, abort mode) makes it
-- take nothing, a pending marker and a record are written. Units moved
-- from donor shards (steal.lua) are deposited first, per SKU, idempotent
-- by move id, as reserve.lua does.
--
-- KEYS[1] users  KEYS[2] res  KEYS[3] pending  KEYS[4] movesin  (see reserve.lua)
-- then per item i (1..n): KEYS[3+2i] stock of its SKU, KEYS[4+2i] out of its SKU
-- then, when KEYS has 4+3n keys, per item i: KEYS[4+2n+i] holders of its SKU
--         (reserve.lua KEYS[#KEYS]): the buyer's bit is set in each, so a
--         buyer whose late bundle holds units (run after they were told
--         STORE_UNAVAILABLE, its abort still to come) is answered by this
--         script (PENDING), not SOLD_OUT from memory (red team bh; with the
--         4+2n keys of old, nothing is written)
-- ARGV[1] user  ARGV[2] per-user limit  ARGV[3] token field ("*:<id>")
-- ARGV[4] now ms  ARGV[5] expire-at ms  ARGV[6] items "<sku>:<qty>,..." (kept
--         in res under "<field>:i", read by bundlerelease/bundleconfirm)
-- ARGV[7] n, then per item i: ARGV[4+4i] qty, ARGV[5+4i] units to deposit,
--         ARGV[6+4i] move id ("" = none), ARGV[7+4i] generation of the units
-- ARGV[8+4n] (optional) the buyer's holder alias (reserve.lua ARGV[#ARGV]):
--         its three bits are set in every item's holders bitset too
--
-- The record is reserve.lua's, with qty the bundle's total units:
-- "p|<user>|<total>|<ms>||", so Lookup, status and reserve.lua's answer to
-- a buyer at their limit read it unchanged.
--
-- Returns {code, ...}:
--   {1}                     OK: every item reserved, marker and record written
--   {2, i, remaining}       EMPTY: item i has fewer units than asked on this shard
--   {3, token id}           PENDING: limit reached, a held reservation still pending
--                           or queued (the most recent such; see reserve.lua's lastAnswer)
--   {4, token id, order id} PURCHASED: limit reached, none pending: the most recent
--                           held one; {4, "", ""} when none is known (never a released one)
--   {5}                     NOT_READY: a SKU's shard was never preheated (or expired)
--   {14}                    ABORTED: the token id was settled first; nothing taken
local n = tonumber(ARGV[7])
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return {14} end
local rs, qs = {}, {}
for i = 1, n do
  local r = redis.call('HGET', KEYS[3 + 2 * i], 'r')
  if not r then return {5} end
  rs[i], qs[i] = tonumber(r), tonumber(ARGV[4 + 4 * i])
end
for i = 1, n do
  local move, stock = ARGV[6 + 4 * i], KEYS[3 + 2 * i]
  if move ~= '' and (redis.call('HGET', stock, 'g') or '0') == ARGV[7 + 4 * i]
      and redis.call('SADD', KEYS[4], move) == 1 then
    local k = tonumber(ARGV[5 + 4 * i])
    redis.call('HINCRBY', stock, 'i', k)
    rs[i] = redis.call('HINCRBY', stock, 'r', k)
    if rs[i] > 0 then redis.call('DEL', KEYS[4 + 2 * i]) end
    if redis.call('SCARD', KEYS[4]) == 1 then redis.call('PEXPIREAT', KEYS[4], ARGV[5]) end
  end
end
local total = 0
for i = 1, n do total = total + qs[i] end
-- The users hash names the reservations the buyer holds, most recent
-- first (reserve.lua KEYS[2]).
local units, toks = 0, {}
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local u, rest = string.match(held, '^(%d+)|(.*)$')
  units = tonumber(u)
  for t in string.gmatch(rest, '[^|]+') do toks[#toks + 1] = t end
  if units + total > tonumber(ARGV[2]) then
    local recs = {}
    if #toks > 0 then recs = redis.call('HMGET', KEYS[2], unpack(toks)) end
    local found
    for j = 1, #toks do
      local st = recs[j] and string.sub(recs[j], 1, 1)
      if st == 'p' or st == 'q' then return {3, toks[j]} end
      if st ~= 'x' and not found then found = j end
    end
    if not found then return {4, '', ''} end
    local oid = ''
    if recs[found] then oid = string.match(recs[found], '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or '' end
    return {4, toks[found], oid}
  end
end
for i = 1, n do
  if rs[i] < qs[i] then return {2, i, rs[i]} end
end
for i = 1, n do
  local stock = KEYS[3 + 2 * i]
  rs[i] = redis.call('HINCRBY', stock, 'r', -qs[i])
  redis.call('HINCRBY', stock, 'p', qs[i])
end
-- The bundle first, then those held before (as reserve.lua: 32 in all).
local list = ARGV[3]
for j = 1, math.min(#toks, units, 31) do list = list .. '|' .. toks[j] end
redis.call('HSET', KEYS[1], ARGV[1], (units + total) .. '|' .. list)
-- The buyer's bit in every item's holders bitset (reserve.lua's markHolder:
-- 64 bits per unit of the shard, 4 Kib to 4 Mib, an existing one keeps its
-- size), with the users field, before any sold-out flag: an instance that
-- reads a flag after its invalidation has had both invalidated first. The
-- holder alias's three bits too (ARGV[8+4n]; reserve.lua ARGV[#ARGV]).
if #KEYS == 4 + 3 * n then
  local h = tonumber(string.sub(redis.sha1hex(ARGV[1]), 1, 8), 16)
  local al = ARGV[8 + 4 * n]
  if al == '' then al = nil end
  for i = 1, n do
    local key = KEYS[4 + 2 * n + i]
    local bits = redis.call('STRLEN', key) * 8
    if bits == 0 then
      local ini = tonumber(redis.call('HGET', KEYS[3 + 2 * i], 'i') or '0')
      bits = 4096
      while bits < 64 * ini and bits < 4194304 do bits = bits * 2 end
      redis.call('SETBIT', key, bits - 1, 0)
      redis.call('PEXPIREAT', key, ARGV[5])
    end
    redis.call('SETBIT', key, h % bits, 1)
    if al then
      for w = 0, 2 do
        redis.call('SETBIT', key, tonumber(string.sub(al, 8 * w + 1, 8 * w + 8), 16) % bits, 1)
      end
    end
  end
end
for i = 1, n do
  if rs[i] == 0 then redis.call('SET', KEYS[4 + 2 * i], '1', 'PXAT', ARGV[5]) end
end
redis.call('HSET', KEYS[2], ARGV[3], 'p|' .. ARGV[1] .. '|' .. total .. '|' .. ARGV[4] .. '||',
  ARGV[3] .. ':i', ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
if units == 0 and redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[5])
end
-- res may have been created by this very call (two fields): give it the
-- activity's expiry whenever it has no TTL yet.
if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIREAT', KEYS[2], ARGV[5]) end
if redis.call('ZCARD', KEYS[3]) == 1 then redis.call('PEXPIREAT', KEYS[3], ARGV[5]) end
return {1}
