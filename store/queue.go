package store

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/redis/rueidis"
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
	// Redelivered is true for an entry taken over from another consumer
	// (XAUTOCLAIM): the shop may already have seen it.
	Redelivered bool
}

func (s *Store) shardKeys(act, sku string, shards, shard int) ShardKeys {
	return s.keys.get(act, sku, shards).Shards[shard]
}

// EnsureQueueGroup creates the consumer group of one shard's stream (and
// the stream, expiring at expireAt) unless it exists.
func (s *Store) EnsureQueueGroup(ctx context.Context, act, sku string, shards, shard int, expireAt int64) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err = ints(s.qgroup.Exec(cctx, c, []string{s.shardKeys(act, sku, shards, shard).Log}, []string{QueueGroup, itoa(expireAt)}))
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
	key := s.shardKeys(act, sku, shards, shard).Log
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

// ClaimQueue takes over up to count entries of one shard's stream that
// another consumer (a dead worker) has held for longer than minIdle,
// scanning the pending list from cursor ("0-0" to start). It returns the
// entries and the cursor to continue from.
func (s *Store) ClaimQueue(ctx context.Context, act, sku string, shards, shard int, consumer string, minIdle time.Duration, cursor string, count int64) ([]QueueEntry, string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, cursor, err
	}
	key := s.shardKeys(act, sku, shards, shard).Log
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
		// A nil field map is an entry trimmed away while pending; it is
		// acked like any other (its reservation is still in res and the
		// reconciler settles it).
		out = append(out, QueueEntry{Shard: shard, ID: x.ID, Token: x.FieldValues["t"], Redelivered: redelivered})
	}
	return out
}

// AckQueue acknowledges and deletes a handled entry, so the stream holds
// only reservations not yet forwarded and its memory stays bounded.
func (s *Store) AckQueue(ctx context.Context, act, sku string, shards, shard int, id string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	key := s.shardKeys(act, sku, shards, shard).Log
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, r := range c.DoMulti(cctx,
		c.B().Xack().Key(key).Group(QueueGroup).Id(id).Build(),
		c.B().Xdel().Key(key).Id(id).Build()) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// QueueLength is how many entries the activity's shard streams hold (they
// are shared by its SKUs; sku only names the keys): the queue-mode
// backlog (entries are deleted once handled).
func (s *Store) QueueLength(ctx context.Context, act, sku string, shards int) (int64, error) {
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, sk := range s.keys.get(act, sku, shards).Shards {
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
