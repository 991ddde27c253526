-- enqueue.lua: give a queued reservation its stream entry, once, after the
-- buyer's own call learned it was reserved (store.Reserve, queue mode).
-- reserve.lua writes a queued record without an entry: a reserve that ran
-- late in Redis, after its buyer was told STORE_UNAVAILABLE, must never be
-- read by a queue worker and sent before its abort lands (abort.lua releases
-- a queued record; with no entry, no worker ever sees it). A record left
-- without one (the abort never landed, or the instance stopped before its
-- enqueue) is released by the reconciler's repair (release.lua "u").
--
-- KEYS[1] res  KEYS[2] log  KEYS[3] stock (its u: entries still to come)
-- ARGV[1] token id  ARGV[2] token (full, for the stream)  ARGV[3] expire-at ms
-- ARGV[4] the buyer's request as the worker sends it to the shop (field r;
--         optional: an entry without it is sent as a request rebuilt from
--         the route: a request the proxy could not copy)
--
-- Returns {code, entry id}:
--   {1, id}  OK: the entry was written
--   {6, id}  SAME: it had one already ("" for a reservation no longer queued)
--   {8, ""}  UNKNOWN: no such reservation
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then
  return {8, ''}
end
if string.sub(rec, 1, 2) ~= 'q|' then
  return {6, ''}
end
local head, id = string.match(rec, '^(q|[^|]*|%d+|%d*|[^|]*)|(.*)$')
if not head then
  return {8, ''}
end
if id ~= '' then
  return {6, id}
end
-- A stream from before sequence ids ("*" ids) keeps "*"; no place shown.
local fields = {'t', ARGV[2]}
if ARGV[4] and ARGV[4] ~= '' then fields[3], fields[4] = 'r', ARGV[4] end
id = redis.pcall('XADD', KEYS[2], '0-*', unpack(fields))
if type(id) == 'table' then id = redis.call('XADD', KEYS[2], '*', unpack(fields)) end
if redis.call('XLEN', KEYS[2]) == 1 then redis.call('PEXPIREAT', KEYS[2], ARGV[3]) end
redis.call('HSET', KEYS[1], ARGV[1], head .. '|' .. id)
if redis.call('HINCRBY', KEYS[3], 'u', -1) < 0 then redis.call('HSET', KEYS[3], 'u', 0) end
return {1, id}
