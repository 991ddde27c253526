-- giveback.lua: a fragment, prepended to release.lua, abort.lua and
-- bundlerelease.lua (Lua scripts have no includes; see embed.go).
--
-- giveBack lowers user's units in the users hash by qty and takes tok, the
-- reservation given back, off the buyer's list of held ones (reserve.lua
-- KEYS[2]: "<units>|<last>|<older>|...", most recent first), so the next
-- held one is named last; the entry goes at 0. A list that tok alone names
-- (a value written before lists were kept: "<units>|<last>") keeps it
-- named: released, it is never answered with (reserve.lua's lastAnswer
-- skips released ones), and a value always names one. When the buyer held
-- any units, the shard's epoch (reserve.lua KEYS[6]) moves, so every
-- instance stops answering the buyer from memory as "at your limit". A
-- shard preheated before the epoch existed has none, and none is created.
local function giveBack(users, epoch, user, qty, tok)
  local held = redis.call('HGET', users, user)
  if not held then return end
  local u, rest = string.match(held, '^(%d+)|(.*)$')
  u = tonumber(u) - qty
  if u <= 0 then
    redis.call('HDEL', users, user)
  else
    local kept = {}
    for t in string.gmatch(rest, '[^|]+') do
      if t ~= tok then kept[#kept + 1] = t end
    end
    if #kept > 0 then rest = table.concat(kept, '|') end
    redis.call('HSET', users, user, u .. '|' .. rest)
  end
  if redis.call('EXISTS', epoch) == 1 then redis.call('INCR', epoch) end
end
