-- reserve.lua: take stock for one buyer on the buyer's home shard, atomically.
-- Optionally first deposits units moved from a donor shard by steal.lua
-- (idempotent by move id), so a buyer whose home shard ran dry still gets
-- stock without a second round trip after the move.
-- reservebatch.lua decides the common call (sync mode, no deposit, no
-- request id) for many buyers at once by the same rules: a change here is
-- a change there (lua TestReserveBatchMatchesReserve compares the two).
--
-- KEYS[1] stock   hash  r=remaining i=initial p=pending c=confirmed x=released
--                 u=queued reservations whose stream entry is still to come
-- KEYS[2] users   hash  user -> "<units>|<last token id>|<older>|...": the
--                 reservations the buyer holds (not released), most recent
--                 first; each holds a unit or more, so at most <units> ids,
--                 and no more than 32 (older ones beyond are not named).
--                 giveback.lua takes a released one off. A value of an
--                 older build ("<units>|<last>") reads as a list of one;
--                 its last may be released (skipped by lastAnswer below)
-- KEYS[3] res     hash  token id -> "<state>|<user>|<qty>|<ms>|<order id>|<reason>"
--                 state p pending (sent, or sync), c confirmed, x released
--                 (released records end in "|<released ms>", see release.lua),
--                 q queued: not sent yet, "q|<user>|<qty>|<queued ms>||<entry id>"
--                 (entry id "" until enqueue.lua writes the entry; claim.lua
--                 turns it into p when a worker sends it)
-- KEYS[4] pending zset  token id -> created (queue mode: sent) ms; never a queued one
-- KEYS[5] out     string, exists while r == 0 (read through client-side caching)
-- KEYS[6] epoch   string, an integer set at preheat, incremented by every
--                 script that lowers a buyer's units (release.lua, abort.lua);
--                 only read, for a buyer at their limit whose last
--                 reservation is confirmed (see PURCHASED below)
-- KEYS[7] log     stream of reservations (queue mode only), entry ids 0-1, 0-2, ...:
--                 the sequence number tells a buyer's place in the queue
-- KEYS[8] movesin set   move ids already deposited here
-- KEYS[7..8] may be left out in sync mode with nothing to deposit and no
--                 request id (issue 10: each key costs Redis time per call)
-- KEYS[#KEYS] when KEYS has 7, 9 or 11 keys (the others above, then this one
--                 last): holders, a bitset of this SKU's shard with the bit
--                 of every buyer this script reserved for, or answered at
--                 their limit with a request id (bit = the first 32
--                 bits of SHA-1(user) % (8 * STRLEN)); read by every instance
--                 through client-side caching once the SKU is sold out, so a
--                 buyer whose bit is set is answered by this script (PENDING
--                 for a reservation still held, ALREADY_PURCHASED), not
--                 SOLD_OUT from memory: a reserve that ran after its caller
--                 gave up (the buyer told STORE_UNAVAILABLE, abort.lua still
--                 to come) holds the buyer's unit (red team rv20)
-- KEYS[9] rid     string (optional; with 10 or 11 keys) the buyer's request id -> "<code>|<token id>",
--                 so a repeated X-Request-Id never reserves twice
-- KEYS[10] ridbits string (with KEYS[9]) a bitset of this SKU's shard: the bit
--                 of every request id this script wrote a record for, read by
--                 every instance through client-side caching once the SKU is
--                 sold out, so a fresh request id is answered SOLD_OUT from
--                 memory and only a possible repeat reads its record
-- ARGV[1] user  ARGV[2] qty  ARGV[3] per-user limit  ARGV[4] token id
-- ARGV[5] now ms (proxy clock)  ARGV[6] expire-at ms  ARGV[7] "1" = queue mode;
--          otherwise sync mode: "0" with the buyer memo, "2" without it (no
--          units and epoch in PURCHASED: the epoch read is work for nobody)
-- ARGV[8] units to deposit  ARGV[9] move id ("" = no deposit)
-- ARGV[10] queue mode: the most entries the stream may hold (its share of
--          queue.max_backlog); never trimmed  ARGV[11] token (full, for the stream)
-- ARGV[12] request id record ttl ms (read with KEYS[9]; always sent)
-- ARGV[13] stock generation of the deposited units (steal.lua's reply):
--          units of an older preheat are not deposited (see store.Preheat)
-- ARGV[14] the request id's hash (uint32), ARGV[15] bits of a new bitset;
--          an existing bitset keeps its size, so writer and readers agree
--          on bit = hash % (8 * STRLEN)
-- ARGV[8..13] may be left out when there is no deposit, no queue mode and no
-- request id (issue 10: the common call sends 7 ARGV, not 13).
-- ARGV[#ARGV] when ARGV has 8, 14 or 16 (an even count): the buyer's holder
--          alias, 24 hex digits of a digest of the session credential they
--          were identified by (identity.user.session; store.HolderAlias):
--          its three bits (its three 32-bit words, each % the size; hashed
--          by the proxy, not here: SHA-1 in the script cost Redis ~0.7 µs
--          a winner) are set in the holders bitset beside the user's, so an
--          instance that never looked the session up can tell, from memory,
--          that it may belong to a holder of a sold-out SKU (decisions §62).
--
-- Returns {code, ...}:
--   {1, remaining}            OK: reserved, pending marker and record written
--   {2, remaining}            EMPTY: home shard has fewer than qty units
--   {3, token id}             PENDING: limit reached, a held reservation still pending
--                             or queued (the most recent such)
--   {4, token id, order id}   PURCHASED: limit reached, none pending: the most recent
--                             held one (confirmed); {4, "", ""} when no held one is
--                             known (only after an older build's writes);
--   {4, token id, order id, "", units, epoch}  the same to a buyer with no
--                             request id, ARGV[7] "0": their units and KEYS[6] ("" when
--                             absent), so the caller may answer their repeats
--                             from memory while the epoch stays the same
--   {5}                       NOT_READY: shard was never preheated (or expired);
--                             a buyer at their limit (no request id, no deposit)
--                             is answered by their reservations first
--   {7, token id}             RELEASED: a repeated request id whose reservation was released
--   {12, backlog}             BACKLOG: queue mode, the stream holds ARGV[10] entries or more
--   {14}                      ABORTED: abort.lua settled this token id first; nothing taken
-- A repeated request id (KEYS[9] exists) answers by the current state of the
-- reservation its first copy got: pending or queued {3, ..}, confirmed {4, ..}, released {7, ..};
-- a first copy refused at the limit ("3|<token>") by the reservation its answer named,
-- and afresh once that one was released.
-- Token ids are random: a record before the reserve is abort.lua's tombstone.
-- It is looked for before the first write (issue 10: not on the answers
-- that write nothing, e.g. every repeat buyer's): a tombstoned call takes
-- nothing, and what a read-only answer says reaches nobody (its caller gave
-- up on it).
local qty = tonumber(ARGV[2])
local move = ARGV[9] or ''
-- KEYS[9] is the request id's record with 10 or 11 keys (with 9, holders).
local rid = #KEYS >= 10 and KEYS[9] or nil
-- heldOf reads a users hash value: the buyer's units and the reservations
-- they hold, most recent first (see KEYS[2]).
local function heldOf(v)
  local u, rest = string.match(v, '^(%d+)|(.*)$')
  local toks = {}
  for t in string.gmatch(rest, '[^|]+') do toks[#toks + 1] = t end
  return tonumber(u), toks
end
-- lastAnswer is the answer to a buyer at their limit, by the reservations
-- they hold: PENDING with the most recent pending or queued one (SPEC §4:
-- still in flight), else PURCHASED with the most recent one that is not
-- released (confirmed). Never a released one: none is named when every
-- listed one was given back (a list an older build left; a red-team find).
local function lastAnswer(toks, units)
  local recs = {}
  if #toks > 0 then recs = redis.call('HMGET', KEYS[3], unpack(toks)) end
  local found
  for j = 1, #toks do
    local st = recs[j] and string.sub(recs[j], 1, 1)
    if st == 'p' or st == 'q' then return {3, toks[j]} end
    if st ~= 'x' and not found then found = j end
  end
  if not found then return {4, '', ''} end
  local rec, last = recs[found], toks[found]
  local oid = ''
  if rec then oid = string.match(rec, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or '' end
  if rec and string.sub(rec, 1, 1) == 'c' and not rid and ARGV[7] == '0' then
    return {4, last, oid, '', units, redis.call('GET', KEYS[6]) or ''}
  end
  return {4, last, oid}
end
-- A buyer at their limit, with no request id and nothing to deposit, is
-- answered first, from two reads (issue 10: every repeat buyer's call).
local held, heldRead = false, false
if not rid and move == '' then
  held, heldRead = redis.call('HGET', KEYS[2], ARGV[1]), true
  if held then
    local u, toks = heldOf(held)
    if u + qty > tonumber(ARGV[3]) then return lastAnswer(toks, u) end
  end
end
local r = redis.call('HGET', KEYS[1], 'r')
if not r then
  return {5}
end
r = tonumber(r)
local tombChecked = false
if move ~= '' then
  if redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1 then return {14} end
  tombChecked = true
  if (redis.call('HGET', KEYS[1], 'g') or '0') ~= (ARGV[13] or '0') then move = '' end
end

if move ~= '' and redis.call('SADD', KEYS[8], move) == 1 then
  local k = tonumber(ARGV[8])
  redis.call('HINCRBY', KEYS[1], 'i', k)
  r = redis.call('HINCRBY', KEYS[1], 'r', k)
  if r > 0 then redis.call('DEL', KEYS[5]) end
  if redis.call('SCARD', KEYS[8]) == 1 then redis.call('PEXPIREAT', KEYS[8], ARGV[6]) end
end

-- markHolder sets the buyer's bit in the holders bitset (see KEYS[#KEYS]),
-- created at 64 bits per unit of the shard (4 Kib to 4 Mib) by its first
-- buyer; an existing bitset keeps its size.
local function markHolder()
  if #KEYS % 2 == 0 then return end
  local key = KEYS[#KEYS]
  local bits = redis.call('STRLEN', key) * 8
  if bits == 0 then
    local i = tonumber(redis.call('HGET', KEYS[1], 'i') or '0')
    bits = 4096
    while bits < 64 * i and bits < 4194304 do bits = bits * 2 end
    redis.call('SETBIT', key, bits - 1, 0)
    redis.call('PEXPIREAT', key, ARGV[6])
  end
  redis.call('SETBIT', key, tonumber(string.sub(redis.sha1hex(ARGV[1]), 1, 8), 16) % bits, 1)
  if #ARGV % 2 == 0 and ARGV[#ARGV] ~= '' then
    local a = ARGV[#ARGV]
    for w = 0, 2 do
      redis.call('SETBIT', key, tonumber(string.sub(a, 8 * w + 1, 8 * w + 8), 16) % bits, 1)
    end
  end
end

-- markRid sets the request id's bit (see KEYS[10]).
local function markRid()
  local bits = redis.call('STRLEN', KEYS[10]) * 8
  if bits == 0 then
    bits = tonumber(ARGV[15])
    redis.call('SETBIT', KEYS[10], bits - 1, 0)
    redis.call('PEXPIREAT', KEYS[10], ARGV[6])
  end
  redis.call('SETBIT', KEYS[10], tonumber(ARGV[14]) % bits, 1)
end
if rid then
  local seen = redis.call('GET', rid)
  if seen then
    -- "<code>|<token id>" or, once confirm.lua kept the winner's answer
    -- from the shop, "<code>|<token id>|<replay>" (any bytes). A confirmed
    -- reservation with a replay answers {4, token id, order id, replay}.
    local last = string.sub(seen, (string.find(seen, '|', 1, true) or 0) + 1)
    local replay = ''
    local sep = string.find(last, '|', 1, true)
    if sep then
      last, replay = string.sub(last, 1, sep - 1), string.sub(last, sep + 1)
    end
    local rec = redis.call('HGET', KEYS[3], last)
    local st = rec and string.sub(rec, 1, 1) or 'p'
    if st == 'p' or st == 'q' then return {3, last} end
    if st == 'x' then
      -- "1|": this request's own reservation, given back: RELEASED. "3|":
      -- the buyer was at their limit and the record names the reservation
      -- they were answered by, another request's; given back since, it
      -- says nothing of this request, which is decided afresh below and
      -- its record rewritten (a red-team find: such a repeat was told
      -- UPSTREAM_FAILED for a request the shop never saw, on every
      -- instance, for 5 min).
      if string.sub(seen, 1, 2) ~= '3|' then return {7, last} end
    else
      local oid = string.match(rec, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or ''
      if replay ~= '' then return {4, last, oid, replay} end
      return {4, last, oid}
    end
  end
end

if not heldRead then held = redis.call('HGET', KEYS[2], ARGV[1]) end
local units, toks = 0, {}
if held then
  units, toks = heldOf(held)
  if units + qty > tonumber(ARGV[3]) then
    if rid and not tombChecked and redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1 then return {14} end
    local ans = lastAnswer(toks, units)
    if rid then
      -- The reservation answered with; with none named, a released one
      -- (its repeat is decided afresh).
      local named = ans[2] ~= '' and ans[2] or toks[1]
      if named then
        redis.call('SET', rid, '3|' .. named, 'PX', ARGV[12])
        markRid()
        -- The buyer holds units: their session's alias too, so a repeat
        -- of this request on an instance that never looked the session
        -- up is let on to its record (decisions §62).
        markHolder()
      end
    end
    return ans
  end
end

if r < qty then
  return {2, r}
end
if ARGV[7] == '1' then
  -- Queued reservations whose entry is still to come (stock field u,
  -- see enqueue.lua) count as entries.
  local backlog = redis.call('XLEN', KEYS[7]) + tonumber(redis.call('HGET', KEYS[1], 'u') or '0')
  if backlog >= tonumber(ARGV[10]) then return {12, backlog} end
end
if ARGV[7] == '1' then
  if not tombChecked and redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1 then return {14} end
else
  -- Sync mode: the record is written first, only if there is none (a
  -- tombstone): one call for the check and the write (issue 10).
  local rec = 'p|' .. ARGV[1] .. '|' .. qty .. '|' .. ARGV[5] .. '||'
  if tombChecked then
    redis.call('HSET', KEYS[3], ARGV[4], rec)
  elseif redis.call('HSETNX', KEYS[3], ARGV[4], rec) == 0 then
    return {14}
  end
end

r = redis.call('HINCRBY', KEYS[1], 'r', -qty)
redis.call('HINCRBY', KEYS[1], 'p', qty)
-- The new reservation first, then those held before (at most one per
-- unit, 32 in all: see KEYS[2]).
local list = ARGV[4]
for j = 1, math.min(#toks, units, 31) do list = list .. '|' .. toks[j] end
redis.call('HSET', KEYS[2], ARGV[1], (units + qty) .. '|' .. list)
-- The buyer's bit and users field before the sold-out flag: an instance
-- that reads the flag after Redis invalidated it has had both invalidated
-- first (store.Store.MayHold reads them).
markHolder()
if r == 0 then redis.call('SET', KEYS[5], '1', 'PXAT', ARGV[6]) end
if ARGV[7] == '1' then
  -- Queued, not sent: out of the pending index until a worker claims it,
  -- and out of the stream until the buyer's call, having heard this reply,
  -- writes its entry (enqueue.lua): a reply that never came (the buyer told
  -- STORE_UNAVAILABLE) leaves a record no worker reads, which its abort
  -- releases.
  redis.call('HSET', KEYS[3], ARGV[4], 'q|' .. ARGV[1] .. '|' .. qty .. '|' .. ARGV[5] .. '||')
  redis.call('HINCRBY', KEYS[1], 'u', 1)
else
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
end
if rid then
  redis.call('SET', rid, '1|' .. ARGV[4], 'PX', ARGV[12])
  markRid()
end
-- Every key this script creates expires with the activity. users, res and
-- the stream are created with the shard's first buyer; the pending index is
-- deleted whenever it empties and so re-created later, hence its own check.
if units == 0 and redis.call('HLEN', KEYS[2]) == 1 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
  redis.call('PEXPIREAT', KEYS[3], ARGV[6])
end
if redis.call('ZCARD', KEYS[4]) == 1 then redis.call('PEXPIREAT', KEYS[4], ARGV[6]) end
return {1, r}
