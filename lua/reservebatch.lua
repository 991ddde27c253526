-- reservebatch.lua: reserve.lua's common call — sync mode, nothing to
-- deposit, no request id — for many buyers of one SKU shard at once, decided
-- one after the other in ARGV order exactly as that many reserve.lua calls
-- in a row would decide them (issue 10: a winner's Redis cost is mostly per
-- call; the reads and writes of the batch go in one multi-field command each).
-- lua_test.go's TestReserveBatchMatchesReserve runs random batches both ways
-- and compares every reply and every key.
--
-- KEYS[1..6] stock, users, res, pending, out, epoch   (see reserve.lua)
-- KEYS[7]    holders (optional; reserve.lua's KEYS[#KEYS]): each winner's bit
-- ARGV[1] now ms (proxy clock)  ARGV[2] expire-at ms
-- ARGV[3] "0" = with the buyer memo, "2" = without (see reserve.lua ARGV[7]);
--         "0a" / "2a": the same, and the buyers' holder aliases follow them
-- ARGV[4..] four per buyer: user, qty, per-user limit, token id; then, with
--         "0a" / "2a", one per buyer: its holder alias ("" = none; see
--         reserve.lua ARGV[#ARGV]), whose bits a winner's call sets
--
-- Returns the buyers' replies in order, flat (issue 10: a reply table per
-- buyer cost Redis more than deciding the buyer): for each, its length
-- and then what reserve.lua would have returned for it: {1, remaining}
-- {2, remaining} {3, token id} {4, token id, order id}
-- {4, token id, order id, "", units, epoch} {5} {14}. So the reply
-- {2, 1, 7, 1, 5} is {1, 7} for the first buyer and {5} for the second.
-- A token id with a record before the batch is abort.lua's tombstone: that
-- buyer takes nothing ({14}), as in reserve.lua.
local now, exp, memo = ARGV[1], ARGV[2], string.sub(ARGV[3], 1, 1) == '0'
local aliased = #ARGV[3] > 1
local n = (#ARGV - 3) / (aliased and 5 or 4)
local find, sub, byte = string.find, string.sub, string.byte
local users = {}
for i = 1, n do users[i] = ARGV[4 * i] end
local held = redis.call('HMGET', KEYS[2], unpack(users))
local r = redis.call('HGET', KEYS[1], 'r')
if r then r = tonumber(r) end

-- Per buyer, the work is a few string calls and no table (issue 10: in
-- Redis's Lua a table, a tonumber or a reply table per buyer each cost
-- about as much as reading a field). A user's state lives at the index of
-- its first buyer in the batch (first): units held (U), the held token ids
-- as reserve.lua's list text "a|b|c" (T), whether users had a field (H),
-- and, once this batch reserved for it (fresh), the new token id (F).
-- Quantities and limits are read once per distinct text (nums).
-- Only buyers who may take stock by what they held before the batch have
-- their token id read for a tombstone: one the limit refuses by its
-- earlier units is refused by them whatever this batch adds, so it never
-- reaches abort.lua's check.
local first, U, T, H, F, Q, L = {}, {}, {}, {}, {}, {}, {}
local nums = {}
local candToks, candAt, nc = {}, {}, 0
for i = 1, n do
  local user = users[i]
  local qs, ls = ARGV[4 * i + 1], ARGV[4 * i + 2]
  local q, l = nums[qs], nums[ls]
  if not q then q = tonumber(qs); nums[qs] = q end
  if not l then l = tonumber(ls); nums[ls] = l end
  Q[i], L[i] = q, l
  local j = first[user]
  if not j then
    j = i
    first[user] = i
    local h = held[i]
    if h then
      local bar = find(h, '|', 1, true)
      U[i], T[i], H[i] = tonumber(sub(h, 1, bar - 1)), sub(h, bar + 1), true
    else
      U[i], T[i], H[i] = 0, '', false
    end
  end
  if not H[j] or U[j] + q <= l then
    nc = nc + 1
    candToks[nc], candAt[i] = ARGV[4 * i + 3], nc
  end
end
local tomb = {}
if nc > 0 then tomb = redis.call('HMGET', KEYS[3], unpack(candToks)) end

-- firstN: the first k (>= 1) token ids of list text l
local function firstN(l, k)
  local at = 0
  for _ = 1, k do
    at = find(l, '|', at + 1, true)
    if not at then return l end
  end
  return sub(l, 1, at - 1)
end

-- Each buyer's reply: code RC, then RA and RB (RX: units, for the long
-- PURCHASED form); see the flat reply built at the end.
local RC, RA, RB, RX = {}, {}, {}, {}
local order, no = {}, 0
local resFV, pendArgs, nw, taken, newUsers = {}, {}, 0, 0, 0
-- firsts: per winner who held no units, whether it added the user's field
-- (reserve.lua sets the expiry when such a winner leaves users with one field)
local firsts = {}
-- later: buyers at their limit whose answer needs their records (below):
-- buyer index (LI), where its token ids start in all (LS), how many (LC),
-- units held (LU)
local LI, LS, LC, LU, nl, all, na = {}, {}, {}, {}, 0, {}, 0
for i = 1, n do
  local user, tok, qty = users[i], ARGV[4 * i + 3], Q[i]
  local j = first[user]
  if (H[j] or F[j]) and U[j] + qty > L[i] then
    if F[j] then
      RC[i], RA[i] = 3, F[j]
    else
      nl = nl + 1
      LI[nl], LS[nl], LU[nl] = i, na + 1, U[j]
      local l = T[j]
      if l ~= '' then
        if find(l, '|', 1, true) then
          for t in string.gmatch(l, '[^|]+') do na = na + 1; all[na] = t end
        else
          na = na + 1
          all[na] = l
        end
      end
      LC[nl] = na + 1 - LS[nl]
    end
  elseif not r then
    RC[i] = 5
  elseif r < qty then
    RC[i], RA[i] = 2, r
  elseif tomb[candAt[i]] then
    RC[i] = 14
  else
    r = r - qty
    taken = taken + qty
    if not F[j] then
      no = no + 1
      order[no] = j
    end
    local units = U[j]
    if units == 0 then
      local added = not H[j] and not F[j]
      if added then newUsers = newUsers + 1 end
      firsts[#firsts + 1] = added
    end
    -- as reserve.lua: the newest first, 32 in all
    local l = T[j]
    if units > 0 and l ~= '' then
      l = tok .. '|' .. firstN(l, math.min(units, 31))
    else
      l = tok
    end
    U[j], T[j], F[j] = units + qty, l, tok
    resFV[nw + 1], resFV[nw + 2] = tok, 'p|' .. user .. '|' .. qty .. '|' .. now .. '||'
    pendArgs[nw + 1], pendArgs[nw + 2] = now, tok
    nw = nw + 2
    RC[i], RA[i] = 1, r
  end
end

if taken > 0 then
  redis.call('HINCRBY', KEYS[1], 'r', -taken)
  redis.call('HINCRBY', KEYS[1], 'p', taken)
  local userFV = {}
  for k = 1, no do
    local j = order[k]
    userFV[2 * k - 1], userFV[2 * k] = users[j], U[j] .. '|' .. T[j]
  end
  redis.call('HSET', KEYS[2], unpack(userFV))
  -- The winners' bits and users fields before the sold-out flag, as
  -- reserve.lua's markHolder.
  local hk = KEYS[7]
  if hk then
    local bits = redis.call('STRLEN', hk) * 8
    if bits == 0 then
      local i = tonumber(redis.call('HGET', KEYS[1], 'i') or '0')
      bits = 4096
      while bits < 64 * i and bits < 4194304 do bits = bits * 2 end
      redis.call('SETBIT', hk, bits - 1, 0)
      redis.call('PEXPIREAT', hk, exp)
    end
    for k = 1, no do
      redis.call('SETBIT', hk, tonumber(sub(redis.sha1hex(users[order[k]]), 1, 8), 16) % bits, 1)
    end
    if aliased then
      for i = 1, n do
        local al = ARGV[3 + 4 * n + i]
        if RC[i] == 1 and al ~= '' then
          local a = al
          for w = 0, 2 do
            redis.call('SETBIT', hk, tonumber(sub(a, 8 * w + 1, 8 * w + 8), 16) % bits, 1)
          end
        end
      end
    end
  end
  if r == 0 then redis.call('SET', KEYS[5], '1', 'PXAT', exp) end
  redis.call('HSET', KEYS[3], unpack(resFV))
  local added = redis.call('ZADD', KEYS[4], unpack(pendArgs))
  -- As reserve.lua: the keys this call created expire with the activity.
  if #firsts > 0 then
    local fields = redis.call('HLEN', KEYS[2]) - newUsers -- before the batch
    for _, added in ipairs(firsts) do
      if added then fields = fields + 1 end
      if fields == 1 then
        redis.call('PEXPIREAT', KEYS[2], exp)
        redis.call('PEXPIREAT', KEYS[3], exp)
        break
      end
    end
  end
  if redis.call('ZCARD', KEYS[4]) == added then redis.call('PEXPIREAT', KEYS[4], exp) end
end

-- Buyers at their limit: as reserve.lua's lastAnswer, by the reservations
-- they held when decided (this batch's own are never among them: a buyer
-- whose last one is this batch's was answered above).
local epoch
if nl > 0 then
  local recs = {}
  if na > 0 then recs = redis.call('HMGET', KEYS[3], unpack(all)) end
  for k = 1, nl do
    local i, s0 = LI[k], LS[k]
    local found
    RC[i] = 4
    for at = s0, s0 + LC[k] - 1 do
      local rec = recs[at]
      local st = rec and byte(rec, 1)
      if st == 112 or st == 113 then -- p, q
        RC[i], RA[i] = 3, all[at]
        break
      end
      if st ~= 120 and not found then found = at end -- not x
    end
    if RC[i] == 4 and not found then
      RA[i], RB[i] = '', '' -- as reserve.lua: never a released one
    elseif RC[i] == 4 then
      local rec = recs[found]
      RA[i], RB[i] = all[found], ''
      if rec then RB[i] = string.match(rec, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or '' end
      if rec and byte(rec, 1) == 99 and memo then -- c: the long form
        epoch = epoch or redis.call('GET', KEYS[6]) or ''
        RX[i] = LU[k]
      end
    end
  end
end

local out, m = {}, 0
for i = 1, n do
  local c = RC[i]
  if c == 4 then
    if RX[i] then
      out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5], out[m + 6], out[m + 7] = 6, 4, RA[i], RB[i], '', RX[i], epoch
      m = m + 7
    else
      out[m + 1], out[m + 2], out[m + 3], out[m + 4] = 3, 4, RA[i], RB[i]
      m = m + 4
    end
  elseif c == 5 or c == 14 then
    out[m + 1], out[m + 2] = 1, c
    m = m + 2
  else
    out[m + 1], out[m + 2], out[m + 3] = 2, c, RA[i]
    m = m + 3
  end
end
return out
