-- reservebatch.lua: reserve.lua's common call — sync mode, nothing to
-- deposit, no request id — for many buyers of one SKU shard at once, decided
-- one after the other in ARGV order exactly as that many reserve.lua calls
-- in a row would decide them (issue 10: a winner's Redis cost is mostly per
-- call; the reads and writes of the batch go in one multi-field command each).
-- lua_test.go's TestReserveBatchMatchesReserve runs random batches both ways
-- and compares every reply and every key.
--
-- KEYS[1..6] stock, users, res, pending, out, epoch   (see reserve.lua)
-- ARGV[1] now ms (proxy clock)  ARGV[2] expire-at ms
-- ARGV[3] "0" = with the buyer memo, "2" = without (see reserve.lua ARGV[7])
-- ARGV[4..] four per buyer: user, qty, per-user limit, token id
--
-- Returns one reply per buyer, in order, each what reserve.lua would have
-- returned for it: {1, remaining} {2, remaining} {3, token id}
-- {4, token id, order id} {4, token id, order id, "", units, epoch} {5} {14}.
-- A token id with a record before the batch is abort.lua's tombstone: that
-- buyer takes nothing ({14}), as in reserve.lua.
local now, exp, memo = ARGV[1], ARGV[2], ARGV[3] == '0'
local n = (#ARGV - 3) / 4
local users, toks = {}, {}
for i = 1, n do
  users[i], toks[i] = ARGV[4 * i], ARGV[4 * i + 3]
end
local held = redis.call('HMGET', KEYS[2], unpack(users))
local tomb = redis.call('HMGET', KEYS[3], unpack(toks))
local r = redis.call('HGET', KEYS[1], 'r')
if r then r = tonumber(r) end

-- state[user]: units held and the held token ids, most recent first, as
-- decided so far in the batch (reserve.lua KEYS[2]); fresh = the last
-- reservation is this batch's (pending, not written yet).
local state, order = {}, {}
local replies, later = {}, {}
local resFV, pendArgs, taken, newUsers = {}, {}, 0, 0
-- firsts: per winner who held no units, whether it added the user's field
-- (reserve.lua sets the expiry when such a winner leaves users with one field)
local firsts = {}
for i = 1, n do
  local user, qty, limit = users[i], tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 2])
  local st = state[user]
  if not st then
    st = {units = 0, had = held[i] ~= false, toks = {}}
    if held[i] then
      local u, rest = string.match(held[i], '^(%d+)|(.*)$')
      st.units = tonumber(u)
      for t in string.gmatch(rest, '[^|]+') do st.toks[#st.toks + 1] = t end
    end
    state[user] = st
  end
  if (st.had or st.fresh) and st.units + qty > limit then
    if st.fresh then
      replies[i] = {3, st.toks[1]}
    else
      replies[i] = false -- lastAnswer, below: one HMGET for all of them
      later[#later + 1] = {i, st.toks, st.units}
    end
  elseif not r then
    replies[i] = {5}
  elseif r < qty then
    replies[i] = {2, r}
  elseif tomb[i] then
    replies[i] = {14}
  else
    r = r - qty
    taken = taken + qty
    if not st.fresh then order[#order + 1] = user end
    if st.units == 0 then
      local added = not st.had and not st.fresh
      if added then newUsers = newUsers + 1 end
      firsts[#firsts + 1] = added
    end
    local list = {toks[i]} -- as reserve.lua: 32 in all
    for j = 1, math.min(#st.toks, st.units, 31) do list[j + 1] = st.toks[j] end
    st.units, st.toks, st.fresh = st.units + qty, list, true
    resFV[#resFV + 1] = toks[i]
    resFV[#resFV + 1] = 'p|' .. user .. '|' .. qty .. '|' .. now .. '||'
    pendArgs[#pendArgs + 1] = now
    pendArgs[#pendArgs + 1] = toks[i]
    replies[i] = {1, r}
  end
end

if taken > 0 then
  redis.call('HINCRBY', KEYS[1], 'r', -taken)
  redis.call('HINCRBY', KEYS[1], 'p', taken)
  if r == 0 then redis.call('SET', KEYS[5], '1', 'PXAT', exp) end
  local userFV = {}
  for _, user in ipairs(order) do
    local st = state[user]
    userFV[#userFV + 1] = user
    userFV[#userFV + 1] = st.units .. '|' .. table.concat(st.toks, '|')
  end
  redis.call('HSET', KEYS[2], unpack(userFV))
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
if #later > 0 then
  local all = {}
  for _, l in ipairs(later) do
    for _, t in ipairs(l[2]) do all[#all + 1] = t end
  end
  local recs = {}
  if #all > 0 then recs = redis.call('HMGET', KEYS[3], unpack(all)) end
  local epoch
  local k = 0
  for _, l in ipairs(later) do
    local ans, found
    for j, t in ipairs(l[2]) do
      local rec = recs[k + j]
      local st = rec and string.sub(rec, 1, 1)
      if st == 'p' or st == 'q' then
        ans = {3, t}
        break
      end
      if st ~= 'x' and not found then found = j end
    end
    if not ans then
      if not found then
        ans = {4, '', ''} -- as reserve.lua: never a released one
      else
        local rec = recs[k + found]
        local oid = ''
        if rec then oid = string.match(rec, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or '' end
        if rec and string.sub(rec, 1, 1) == 'c' and memo then
          epoch = epoch or redis.call('GET', KEYS[6]) or ''
          ans = {4, l[2][found], oid, '', l[3], epoch}
        else
          ans = {4, l[2][found], oid}
        end
      end
    end
    replies[l[1]] = ans
    k = k + #l[2]
  end
end
return replies
