package store

import (
	"context"
	"strconv"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// PreheatRecord is what the meta hash says about an activity's preheat.
type PreheatRecord struct {
	Ready bool // stock is loaded (meta ready=1)
	// At is when the stock was loaded: the stock generation, which Preheat
	// sets to its clock in ms (zero when not ready).
	At time.Time
	// ScheduledBy names the serve instance whose scheduled preheat
	// (preheat_at) loaded the stock; "" for a preheat by hand.
	ScheduledBy string
	// Loading: not ready because a preheat is writing the stock, or
	// stopped midway (the next preheat finishes it); not stock lost.
	Loading bool
	// SaleEnd is the end of the sale the stock was loaded for (the latest
	// `end` a preheat recorded); zero when none is recorded.
	SaleEnd time.Time
}

// ForEarlierSale reports whether the stock loaded is an earlier sale's of
// the same id: a's window starts at or after the recorded sale's end (a
// new sale reusing the id, the old keys living on for key_ttl_after_end).
// Such stock is not a's: a preheat decides (store.ErrRunning when the
// earlier sale sold units, what to do in its message).
func (r PreheatRecord) ForEarlierSale(a *config.Activity) bool {
	return r.Ready && !r.SaleEnd.IsZero() && !a.Start.Before(r.SaleEnd)
}

// metaScheduledBy is the meta hash field a scheduled preheat leaves. A
// later Preheat rewrites the meta hash whole and drops it, as it should:
// the stock is then not the scheduler's.
const metaScheduledBy = "scheduled_by"

// PreheatRecord reads the activity's preheat state from Redis, bypassing
// the client-side cache (a scheduler deciding whether to preheat must not
// trust a value one invalidation behind).
func (s *Store) PreheatRecord(ctx context.Context, act string) (PreheatRecord, error) {
	c, err := s.Client()
	if err != nil {
		return PreheatRecord{}, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := c.Do(cctx, c.B().Hmget().Key(s.MetaKey(act)).Field("ready", "ver", metaScheduledBy, metaLoading, metaSaleEnd).Build()).ToArray()
	if err != nil {
		return PreheatRecord{}, wrap(err)
	}
	var v [5]string
	for i := range m {
		if i < len(v) {
			v[i], _ = m[i].ToString()
		}
	}
	r := PreheatRecord{Ready: v[0] == "1", ScheduledBy: v[2], Loading: v[0] != "1" && v[3] != ""}
	if ms, err := strconv.ParseInt(v[1], 10, 64); err == nil && r.Ready {
		r.At = time.UnixMilli(ms)
	}
	if ms, err := strconv.ParseInt(v[4], 10, 64); err == nil && ms > 0 {
		r.SaleEnd = time.UnixMilli(ms)
	}
	return r, nil
}

// MarkScheduledPreheat records in the meta hash that holder's scheduled
// preheat loaded the stock (shown by `status`). Only an existing, ready
// meta hash is marked: never one a concurrent forced preheat is rewriting.
func (s *Store) MarkScheduledPreheat(ctx context.Context, act, holder string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	err = c.Do(cctx, c.B().Eval().Script(`if redis.call('HGET', KEYS[1], 'ready') == '1' then
  return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 0`).Numkeys(1).Key(s.MetaKey(act)).Arg(metaScheduledBy, holder).Build()).Error()
	return wrap(err)
}
