-- spill.lua: a sync-mode winner the shop has no room for (its in-flight
-- budget, upstream.max_inflight, is full and upstream.overflow is queue)
-- joins the activity's queue: pending -> queued, out of the pending index,
-- one stream entry, so a queue worker sends it when the shop has room
-- (claim.lua turns it back into pending then). Nothing was sent yet.
--
-- KEYS[1] res  KEYS[2] pending  KEYS[3] log   (see reserve.lua)
-- ARGV[1] token id  ARGV[2] token (full, for the stream entry)
-- ARGV[3] now ms (proxy clock: queued since)
-- ARGV[4] the most entries the stream may hold (its share of queue.max_backlog)
-- ARGV[5] expire-at ms (for a stream this creates)
-- ARGV[6] the buyer's request as the worker sends it to the shop (field r;
--         optional, see enqueue.lua)
--
-- Returns {code, ...}:
--   {1}           OK: queued
--   {12, backlog} BACKLOG: the stream already holds ARGV[4] entries; nothing changed
--   {6}           SAME: already queued (nothing changed)
--   {7}           RELEASED, {9} CONFIRMED, {8} UNKNOWN: not pending; nothing changed
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then
  return {8}
end
local state, user, qty = string.match(rec, '^(%a)|([^|]*)|(%d+)|')
if state == 'q' then return {6} end
if state == 'x' then return {7} end
if state == 'c' then return {9} end
if state ~= 'p' then return {8} end
local backlog = redis.call('XLEN', KEYS[3])
if backlog >= tonumber(ARGV[4]) then
  return {12, backlog}
end
-- Sequence ids as reserve.lua writes them (a buyer's place in the queue);
-- a stream from before them keeps "*" ids.
local fields = {'t', ARGV[2]}
if ARGV[6] and ARGV[6] ~= '' then fields[3], fields[4] = 'r', ARGV[6] end
local id = redis.pcall('XADD', KEYS[3], '0-*', unpack(fields))
if type(id) == 'table' then id = redis.call('XADD', KEYS[3], '*', unpack(fields)) end
redis.call('HSET', KEYS[1], ARGV[1], 'q|' .. user .. '|' .. qty .. '|' .. ARGV[3] .. '||' .. id)
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('PTTL', KEYS[3]) == -1 then redis.call('PEXPIREAT', KEYS[3], ARGV[5]) end
return {1}
