package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// OutMark is one SKU's sold-out mark as SoldOutMany last read it; the
// caller keeps one per SKU (admission's refresher) and hands it back.
type OutMark struct {
	// Out: every shard's sold-out flag was set at the read.
	Out bool
	// Transit (with Out): an instance marked units of the SKU in transit,
	// or a mark could not be read (fleetmark.go): STORE_UNAVAILABLE, not
	// SOLD_OUT.
	Transit bool
	// The read: of which keys, at which flag generation of the SKU and
	// cache epoch of the store, when (unix ns). Zero: never read.
	k     *SKUKeys
	gen   uint64
	epoch uint64
	at    int64
}

// soldOutBatch bounds the GETs of one DoMultiCache call of SoldOutMany.
const soldOutBatch = 4096

// SoldOutMany is SoldOut for many SKUs of one activity, for a caller that
// asks again and again (admission's refresher, on every invalidation any
// key of the instance gets, and every IdleRefresh): marks[i] is skus[i]'s.
//
// A mark is read again only when it may have changed: one of the SKU's
// own flags was invalidated since (SKUKeys.outGen), a connection's cache
// was dropped (CacheEpoch), or the read is older than flagTTL, the
// client-side cache's own bound should an invalidation ever be lost. Those
// read all go in one batch (per soldOutBatch flags). Before, every SKU's
// flags were read one SKU after the other on every pass, and any
// invalidation of any key made every SKU's read stale: with 2,000 SKUs of
// 4 shards an idle sale cost the proxy ~0.4 of a CPU in 4,000 sequential
// round trips a second, and a busy one a pass longer than the snapshot's
// staleAfter, so every buy fell back to reading the meta itself (red team
// cat16).
//
// A flag that cannot be read counts as "not known to be empty", as in
// outFlags, and its SKU is read again on the next call; only when no flag
// at all could be read is the error returned.
func (s *Store) SoldOutMany(ctx context.Context, act string, skus []string, shards int, marks []OutMark) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	now := time.Now().UnixNano()
	epoch := s.epoch.Load()
	type want struct {
		i   int
		k   *SKUKeys
		gen uint64
	}
	var wants []want
	var cmds []rueidis.CacheableTTL
	for i, id := range skus {
		k, err := s.skuKeys(ctx, act, id, shards)
		if err != nil {
			return err
		}
		m := &marks[i]
		gen := k.outGen.Load() // before the read: an invalidation after it moves it on
		// A mark seen is read again within outSnapTTL even with no
		// invalidation: it lapses by its TTL (fleetmark.go).
		if m.k == k && m.gen == gen && m.epoch == epoch && uint64(now-m.at) < uint64(flagTTL) && (!m.Transit || uint64(now-m.at) < uint64(outSnapTTL)) {
			continue
		}
		wants = append(wants, want{i: i, k: k, gen: gen})
		for _, key := range k.outKeys {
			cmds = append(cmds, rueidis.CT(c.B().Get().Key(key).Cache(), flagTTL))
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	res := make([]rueidis.RedisResult, 0, len(cmds))
	for from := 0; from < len(cmds); from += soldOutBatch {
		cctx, cancel := s.ctx(ctx)
		res = append(res, c.DoMultiCache(cctx, cmds[from:min(from+soldOutBatch, len(cmds))]...)...)
		cancel()
	}
	var failed error
	nfailed, j := 0, 0
	var mcmds []rueidis.CacheableTTL // the transit marks of the SKUs found out
	for _, w := range wants {
		out, ok := true, true
		for range w.k.outKeys {
			err := res[j].Error()
			j++
			switch {
			case err == nil:
			case rueidis.IsRedisNil(err):
				out = false
			default:
				failed, ok, out = err, false, false
				nfailed++
			}
		}
		m := &marks[w.i]
		m.Out, m.Transit = out, false
		if ok {
			m.k, m.gen, m.epoch, m.at = w.k, w.gen, epoch, now
		} else {
			m.k = nil // read again next time
		}
		if out {
			for _, key := range w.k.markKeys {
				mcmds = append(mcmds, rueidis.CT(c.B().Get().Key(key).Cache(), flagTTL))
			}
		}
	}
	if nfailed == len(cmds) {
		return wrap(failed)
	}
	if len(mcmds) == 0 {
		return nil
	}
	// Sold out by the flags: whether the fleet marks units in transit. A
	// second batch, for those SKUs only (a SKU on sale reads none); a
	// mark that cannot be read counts as set.
	res = res[:0]
	for from := 0; from < len(mcmds); from += soldOutBatch {
		cctx, cancel := s.ctx(ctx)
		res = append(res, c.DoMultiCache(cctx, mcmds[from:min(from+soldOutBatch, len(mcmds))]...)...)
		cancel()
	}
	j = 0
	for _, w := range wants {
		m := &marks[w.i]
		if !m.Out {
			continue
		}
		for range w.k.markKeys {
			if err := res[j].Error(); err == nil || !rueidis.IsRedisNil(err) {
				m.Transit = true
			}
			j++
		}
	}
	return nil
}
