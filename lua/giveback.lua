-- giveback.lua: a fragment, prepended to release.lua, abort.lua and
-- bundlerelease.lua (Lua scripts have no includes; see embed.go).
--
-- giveBack lowers user's units in the users hash by qty (the entry goes at
-- 0; its last reservation stays named) and, when it held any, moves the
-- shard's epoch (reserve.lua KEYS[8]) so every instance stops answering the
-- buyer from memory as "at your limit". A shard preheated before the epoch
-- existed has none, and none is created.
local function giveBack(users, epoch, user, qty)
  local held = redis.call('HGET', users, user)
  if not held then return end
  local u, last = string.match(held, '^(%d+)|(.*)$')
  u = tonumber(u) - qty
  if u <= 0 then
    redis.call('HDEL', users, user)
  else
    redis.call('HSET', users, user, u .. '|' .. last)
  end
  if redis.call('EXISTS', epoch) == 1 then redis.call('INCR', epoch) end
end
