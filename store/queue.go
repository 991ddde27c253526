package store

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// QueueGroup is the consumer group queue-mode workers of every instance
// share on each shard's reservation stream.
const QueueGroup = "seckill-workers"

// ErrNoGroup means a shard stream has no consumer group (yet, or again
// after a forced preheat wiped the stream): call EnsureQueueGroup.
var ErrNoGroup = errors.New("queue stream has no consumer group")

// QueueEntry is one reservation waiting in a shard's stream.
type QueueEntry struct {
	Shard int
	ID    string // stream entry id, for XACK
	Token string // the reservation's token text
	// Request is the buyer's request as the shop is to get it (HTTP/1.1
	// wire form, without the X-Seckill-* headers the worker adds); empty
	// for an entry written without one (reconcile --repair).
	Request string
	// Redelivered is true for an entry taken over from another consumer
	// (XAUTOCLAIM): the shop may already have seen it.
	Redelivered bool
}

func (s *Store) shardKeys(ctx context.Context, act, sku string, shards, shard int) (ShardKeys, error) {
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return ShardKeys{}, err
	}
	return k.Shards[shard], nil
}

// EnsureQueueGroup creates the consumer group of one shard's stream (and
// the stream, expiring at expireAt) unless it exists.
func (s *Store) EnsureQueueGroup(ctx context.Context, act, sku string, shards, shard int, expireAt int64) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	sk, err := s.shardKeys(ctx, act, sku, shards, shard)
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err = ints(s.qgroup.Exec(cctx, c, []string{sk.Log}, []string{QueueGroup, itoa(expireAt)}))
	return err
}

func noGroup(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "NOGROUP") {
		return ErrNoGroup
	}
	return wrap(err)
}

// ReadQueue hands consumer up to count new entries of one shard's stream,
// without blocking. They stay in the consumer's pending list until AckQueue.
func (s *Store) ReadQueue(ctx context.Context, act, sku string, shards, shard int, consumer string, count int64) ([]QueueEntry, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	sk, err := s.shardKeys(ctx, act, sku, shards, shard)
	if err != nil {
		return nil, err
	}
	key := sk.Log
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := c.Do(cctx, c.B().Xreadgroup().Group(QueueGroup, consumer).Count(count).Streams().Key(key).Id(">").Build()).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, noGroup(err)
	}
	return entries(shard, m[key], false), nil
}

// ReadOwnQueue reads up to count entries of one shard's stream that were
// delivered to consumer and not acknowledged, with ids above after ("0" to
// start): a read whose reply never came (Redis stalled) delivered its
// entries all the same, and a worker that gave up on one before sending it
// left it there; without this only another consumer's takeover, after
// ClaimIdle, would send them. It returns the entries and whether more may
// follow (count of them came back).
func (s *Store) ReadOwnQueue(ctx context.Context, act, sku string, shards, shard int, consumer, after string, count int64) ([]QueueEntry, bool, error) {
	c, err := s.Client()
	if err != nil {
		return nil, false, err
	}
	sk, err := s.shardKeys(ctx, act, sku, shards, shard)
	if err != nil {
		return nil, false, err
	}
	key := sk.Log
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := c.Do(cctx, c.B().Xreadgroup().Group(QueueGroup, consumer).Count(count).Streams().Key(key).Id(after).Build()).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, noGroup(err)
	}
	es := entries(shard, m[key], true)
	return es, int64(len(es)) >= count, nil
}

// ClaimQueue takes over up to count entries of one shard's stream that
// another consumer (a dead worker) has held for longer than minIdle,
// scanning the pending list from cursor ("0-0" to start). It returns the
// entries and the cursor to continue from.
func (s *Store) ClaimQueue(ctx context.Context, act, sku string, shards, shard int, consumer string, minIdle time.Duration, cursor string, count int64) ([]QueueEntry, string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, cursor, err
	}
	sk, err := s.shardKeys(ctx, act, sku, shards, shard)
	if err != nil {
		return nil, cursor, err
	}
	key := sk.Log
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	arr, err := c.Do(cctx, c.B().Xautoclaim().Key(key).Group(QueueGroup).Consumer(consumer).
		MinIdleTime(itoa(minIdle.Milliseconds())).Start(cursor).Count(count).Build()).ToArray()
	if err != nil {
		return nil, cursor, noGroup(err)
	}
	if len(arr) < 2 {
		return nil, cursor, ErrInvalidResponse
	}
	next, err := arr[0].ToString()
	if err != nil {
		return nil, cursor, ErrInvalidResponse
	}
	xs, err := arr[1].AsXRange()
	if err != nil {
		return nil, cursor, ErrInvalidResponse
	}
	return entries(shard, xs, true), next, nil
}

func entries(shard int, xs []rueidis.XRangeEntry, redelivered bool) []QueueEntry {
	out := make([]QueueEntry, 0, len(xs))
	for _, x := range xs {
		// A nil field map is an entry deleted while pending (streams are no
		// longer trimmed, but one written before may have been); it is acked
		// like any other.
		out = append(out, QueueEntry{Shard: shard, ID: x.ID, Token: x.FieldValues["t"], Request: x.FieldValues["r"], Redelivered: redelivered})
	}
	return out
}

// AckQueue acknowledges and deletes a handled entry, so the stream holds
// only reservations not yet forwarded and its memory stays bounded. Only
// the entry that still carries token is touched: a forced preheat deletes
// the stream, and its new entries take ids from 0-1 again, so acking an old
// id blindly deleted a new buyer's entry before any worker read it (that
// buyer stayed QUEUED for good: red-team finding).
func (s *Store) AckQueue(ctx context.Context, act, sku string, shards, shard int, id, token string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	sk, err := s.shardKeys(ctx, act, sku, shards, shard)
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrap(ackScript.Exec(cctx, c, []string{sk.Log}, []string{id, token, QueueGroup}).Error())
}

// ackScript: XACK + XDEL of entry ARGV[1] unless the stream holds another
// entry under that id (ARGV[2] is the token it must carry).
var ackScript = rueidis.NewLuaScript(`local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 1 then
  local f, t = e[1][2], nil
  for i = 1, #f, 2 do if f[i] == 't' then t = f[i + 1] end end
  if t ~= ARGV[2] then return 0 end
  redis.call('XDEL', KEYS[1], ARGV[1])
end
redis.call('XACK', KEYS[1], ARGV[3], ARGV[1])
return 1`)

var claimScript = rueidis.NewLuaScript(lua.Claim)

// Claim turns a queued reservation into a pending one just before a queue
// worker sends it, stamping nowMs as its send time (record and pending
// index). Replies: OK (send it), Same (already pending: a redelivered
// entry, re-stamped; send again or verify), Released, Confirmed, Unknown
// (do not send).
func (s *Store) Claim(ctx context.Context, t Token, shards int, nowMs, expireAt int64) (lua.Code, error) {
	return s.transition(ctx, t, shards, nil, claimScript, nil,
		func(k ShardKeys) []string { return []string{k.Res, k.Pending} },
		[]string{t.Field(), itoa(nowMs), itoa(expireAt)})
}

// QueuePosition estimates how many queued entries of the activity are
// ahead of a queued reservation whose stream entry is entryID: the entries
// of its shard's stream between the consumer group's last delivered one
// and it (entry ids are sequence numbers, see lua/reserve.lua), times the
// shards, which workers drain in turn. One O(1) call (XINFO GROUPS). ok is
// false when entryID is not a sequence id (a stream from an older version).
func (s *Store) QueuePosition(ctx context.Context, t Token, shards int, entryID string) (int64, bool, error) {
	seq, ok := entrySeq(entryID)
	if !ok || t.Shard >= shards {
		return 0, false, nil
	}
	c, err := s.Client()
	if err != nil {
		return 0, false, err
	}
	sk, err := s.shardKeys(ctx, t.Activity, t.SKU, shards, t.Shard)
	if err != nil {
		return 0, false, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	groups, err := c.Do(cctx, c.B().XinfoGroups().Key(sk.Log).Build()).ToArray()
	if err != nil {
		return 0, false, wrap(err)
	}
	var done int64 // no group yet: no worker has read anything
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return 0, false, ErrInvalidResponse
		}
		name, lastID := m["name"], m["last-delivered-id"]
		if n, _ := name.ToString(); n != QueueGroup {
			continue
		}
		last, _ := lastID.ToString()
		if done, ok = entrySeq(last); !ok && last != "0-0" {
			return 0, false, nil
		}
	}
	return max(0, seq-done-1) * int64(shards), true, nil
}

// entrySeq reads the sequence number of a queue entry id "0-<seq>".
func entrySeq(id string) (int64, bool) {
	rest, ok := strings.CutPrefix(id, "0-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n > 0
}

// QueueLength is how many entries the activity's shard streams hold (they
// are shared by its SKUs; sku only names the keys): the queue-mode
// backlog (entries are deleted once handled).
func (s *Store) QueueLength(ctx context.Context, act, sku string, shards int) (int64, error) {
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, sk := range k.Shards {
		cctx, cancel := s.ctx(ctx)
		v, err := c.Do(cctx, c.B().Xlen().Key(sk.Log).Build()).AsInt64()
		cancel()
		if err != nil {
			return 0, wrap(err)
		}
		n += v
	}
	return n, nil
}

// TakeTokens takes up to want tokens from the activity's fleet-wide
// forwarding bucket (rate per second, at most capacity saved up). When it
// grants none, wait says when the next one is due.
func (s *Store) TakeTokens(ctx context.Context, act string, rate float64, capacity, want int64) (int64, time.Duration, error) {
	c, err := s.Client()
	if err != nil {
		return 0, 0, err
	}
	refill := int64(math.Max(1, math.Round(rate*1000))) // micro-tokens per ms
	key := s.prefix + ":{" + act + "}:qbucket"
	// The bucket forgets itself once full again and unused for a while.
	ttl := max(time.Minute, time.Duration(float64(capacity)/rate*float64(time.Second))*2)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := ints(s.bucket.Exec(cctx, c, []string{key},
		[]string{itoa(refill), itoa(capacity * 1_000_000), itoa(want), itoa(ttl.Milliseconds())}))
	if err != nil {
		return 0, 0, err
	}
	if len(r) != 2 {
		return 0, 0, ErrInvalidResponse
	}
	return r[0], time.Duration(r[1]) * time.Millisecond, nil
}

// OldestQueued is when the oldest reservation still waiting in the
// activity's shard streams (queued, not yet delivered to any worker) was
// queued: per shard, the first entry after the consumer group's
// last-delivered id, whose record is still queued. The streams are shared
// by the activity's SKUs (sku names any of them). found is false when no
// shard has one waiting.
func (s *Store) OldestQueued(ctx context.Context, act, sku string, shards int) (ms int64, found bool, err error) {
	c, err := s.Client()
	if err != nil {
		return 0, false, err
	}
	for shard := 0; shard < shards; shard++ {
		sk, err := s.shardKeys(ctx, act, sku, shards, shard)
		if err != nil {
			return 0, false, err
		}
		cctx, cancel := s.ctx(ctx)
		start := "-"
		groups, err := c.Do(cctx, c.B().XinfoGroups().Key(sk.Log).Build()).ToArray()
		if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis {
			cancel()
			return 0, false, wrap(err)
		} // a Redis error here is "no such key": no stream, nothing queued
		for _, g := range groups {
			m, err := g.AsMap()
			if err != nil {
				cancel()
				return 0, false, ErrInvalidResponse
			}
			name, lastID := m["name"], m["last-delivered-id"]
			if n, _ := name.ToString(); n == QueueGroup {
				if last, _ := lastID.ToString(); last != "" && last != "0-0" {
					start = "(" + last
				}
			}
		}
		entries, err := c.Do(cctx, c.B().Xrange().Key(sk.Log).Start(start).End("+").Count(1).Build()).AsXRange()
		if err != nil {
			cancel()
			if rueidis.IsRedisNil(err) {
				continue
			}
			return 0, false, wrap(err)
		}
		if len(entries) == 0 {
			cancel()
			continue
		}
		tok, perr := ParseToken(entries[0].FieldValues["t"])
		if perr != nil || tok.Shard != shard {
			cancel()
			continue
		}
		rec, err := c.Do(cctx, c.B().Hget().Key(sk.Res).Field(tok.Field()).Build()).ToString()
		cancel()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return 0, false, wrap(err)
		}
		if r, ok := parseRecord(tok, rec); ok && r.State == StateQueued && (!found || r.CreatedMs < ms) {
			ms, found = r.CreatedMs, true
		}
	}
	return ms, found, nil
}

// orphanPage is how many records of a shard's reservations hash one HSCAN
// step returns while looking for queued records without a stream entry.
const orphanPage = 500

// OrphanReason is the release reason of a queued reservation that never
// got its stream entry (ReleaseOrphans).
const OrphanReason = "unlisted"

// ReleaseOrphans finds act's queued reservations whose stream entry was
// never written and that were queued before cutoffMs, and with repair
// releases them (reason OrphanReason). No worker can see them, and Redis
// cannot tell whose they are: a reserve that ran but whose reply never came
// (its buyer was told STORE_UNAVAILABLE, and the abort that settles it could
// not land: the instance was cut off or stopped), or one whose buyer was
// told QUEUED but whose enqueue never landed while its instance lived (the
// enqueue is retried in the background until it does; see Store.enqueue).
// Sending such a record would place an order for a buyer told that nothing
// is held; releasing it leaves a QUEUED buyer's reservation released, its
// state shown by the status poll and the unit back on sale. The release is
// conditional (release.lua "u"): a record enqueued, sent or settled since
// this read is left alone. It returns the tokens found (and, with repair,
// released or found settled meanwhile).
func (s *Store) ReleaseOrphans(ctx context.Context, act string, shards int, cutoffMs, nowMs int64, repair bool) ([]Token, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	var found []Token
	for shard := 0; shard < shards; shard++ {
		cursor := uint64(0)
		for {
			// Every SKU's reservations of the shard share its res hash: any
			// SKU names it (the token says which SKU each one is).
			sk, err := s.shardKeys(ctx, act, BundleSKU, shards, shard)
			if err != nil {
				return found, err
			}
			cctx, cancel := s.ctx(ctx)
			e, err := c.Do(cctx, c.B().Hscan().Key(sk.Res).Cursor(cursor).Count(orphanPage).Build()).AsScanEntry()
			cancel()
			if err != nil {
				return found, wrap(err)
			}
			for i := 0; i+1 < len(e.Elements); i += 2 {
				field, rec := e.Elements[i], e.Elements[i+1]
				if !strings.HasPrefix(rec, "q|") || !strings.HasSuffix(rec, "|") {
					continue
				}
				tok, ok := tokenOfField(act, shard, field)
				if !ok {
					continue
				}
				if r, ok := parseRecord(tok, rec); !ok || r.CreatedMs >= cutoffMs {
					continue
				}
				found = append(found, tok)
				if !repair {
					continue
				}
				if _, err := s.transition(ctx, tok, shards, nil, s.release, s.fencedRelease, releaseKeys,
					[]string{tok.Field(), OrphanReason, itoa(nowMs), "u", ""}); err != nil {
					return found, err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return found, nil
}
