package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// Fleet-visible transit marks (decisions §58).
//
// §54 made the instance whose call went unanswered answer a SKU's
// sold-out buyers STORE_UNAVAILABLE while its settles wait; every other
// instance still answered SOLD_OUT from its flags, during a master's stall
// and for the few ms after it that its client-side cache lags Redis, while
// units sat in late reservations whose aborts give them back (the fleet
// gap). Now the instance holding a settle also SETs a short-lived mark,
// Transit, on every shard's tag of the SKU (one lands on a live master
// unless every shard of the SKU shares the stalled one), and renews it
// while any settle of the SKU is pending here (transitLive). Every instance reads the marks beside the flags through
// client-side caching, only when every flag is set: a SKU on sale reads
// none. A mark seen turns a SOLD_OUT into STORE_UNAVAILABLE, as a settle of
// its own would (Reserve, ReserveBundle, admission's sold-out mark through
// OutMark.Transit).
//
// Nothing is written while nothing is pending; with nothing marked the
// sold-out answer from memory costs one pointer load more. A mark
// lingers at most fleetMarkTTL past its last write: the fleet answers
// STORE_UNAVAILABLE for 200-300 ms past the last settle's answer (plus
// Redis's expiry and the reader's refresh, up to ~100 ms), never for as
// long as a stalled Redis stays stalled unless a settle keeps waiting on
// it. A write sent to the stalled master runs when it wakes and lasts
// fleetMarkTTL from then.

// fleetMarkTTL is a mark's lifetime in Redis (SET PX): renewed every
// fleetMarkEvery while a settle of the SKU is pending.
const (
	fleetMarkTTL   = 300 * time.Millisecond
	fleetMarkEvery = 100 * time.Millisecond
)

// markTransit marks k's SKU in transit across the fleet: a first write now
// unless one was tried within fleetMarkEvery/2 — waiting, within
// redis.timeout, until one shard's write is answered, so that the buyer
// told STORE_UNAVAILABLE by the caller who retries on another instance
// finds the mark there (one caller at a time waits: in an outage of every
// master the others' 503s are not held up) — then renewals while any
// settle of the SKU is pending (renewMarks).
func (s *Store) markTransit(k *SKUKeys) {
	now := time.Now().UnixNano()
	if last := k.markTried.Load(); now-last >= int64(fleetMarkEvery/2) && k.markTried.CompareAndSwap(last, now) {
		s.writeMarks(k, true)
	}
	if k.marking.CompareAndSwap(false, true) {
		go s.renewMarks(k)
	}
}

// renewMarks writes k's marks every fleetMarkEvery until no settle of the
// SKU waits here (k.transitLive): the last write outlives the last settle
// by fleetMarkTTL - fleetMarkEvery at least, ample for the readers' flags
// to hear of what the settles gave back (a few ms; transitGrace is this
// instance's own margin for the same).
func (s *Store) renewMarks(k *SKUKeys) {
	t := time.NewTicker(fleetMarkEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			k.marking.Store(false)
			return
		case <-t.C:
		}
		if k.transitLive.Load() == 0 {
			k.marking.Store(false)
			// A settle counted between the load and the store found the
			// renewer still running and started none: go on for it.
			if k.transitLive.Load() == 0 || !k.marking.CompareAndSwap(false, true) {
				return
			}
		}
		s.writeMarks(k, false)
	}
}

// writeMarks SETs every shard's mark whose last write was answered; wait
// waits until one is answered (or every one failed, or redis.timeout).
// A shard whose master does not answer gets no second write until the
// first one's reply: no pile on a stalled node.
func (s *Store) writeMarks(k *SKUKeys, wait bool) {
	c, err := s.Client()
	if err != nil {
		return
	}
	done := make(chan bool, len(k.markKeys))
	sent := 0
	for i, key := range k.markKeys {
		if !k.markBusy[i].CompareAndSwap(false, true) {
			continue
		}
		sent++
		go func() {
			cctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			err := c.Do(cctx, c.B().Set().Key(key).Value("1").PxMilliseconds(fleetMarkTTL.Milliseconds()).Build()).Error()
			cancel()
			k.markBusy[i].Store(false)
			done <- err == nil
		}()
	}
	if !wait {
		return
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	for ; sent > 0; sent-- {
		select {
		case ok := <-done:
			if ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// readMarks reports whether any shard's mark of k's SKU is set: from the
// last read while no mark was invalidated since (k.marks, as bitsView),
// else through the client-side cache (key by key while the answers come
// from memory, the rest in one batch at the first miss, as readOutFlags).
// A mark that cannot be read counts as set: not known, so not SOLD_OUT.
func (s *Store) readMarks(cctx context.Context, c rueidis.Client, k *SKUKeys) bool {
	now, epoch := time.Now().UnixNano(), s.epoch.Load()
	if sn := k.marks.Load(); sn != nil && sn.gen == k.markGen.Load() && sn.epoch == epoch && k.tracked.Load() &&
		uint64(now-sn.at) < uint64(outSnapTTL) {
		return sn.marked
	}
	gen := k.markGen.Load() // before the read: an invalidation during it moves it on
	marked, failed := false, false
	defer func() {
		if !failed {
			k.marks.Store(&marksSnap{gen: gen, epoch: epoch, at: now, marked: marked})
		}
	}()
	read := func(r rueidis.RedisResult) {
		switch err := r.Error(); {
		case err == nil:
			marked = true
		case !rueidis.IsRedisNil(err):
			marked, failed = true, true
		}
	}
	from := 0
	for ; from < len(k.markKeys) && !marked; from++ {
		r := c.DoCache(cctx, c.B().Get().Key(k.markKeys[from]).Cache(), flagTTL)
		read(r)
		if !r.IsCacheHit() {
			from++
			break
		}
	}
	if rest := k.markKeys[from:]; len(rest) > 0 && !marked {
		cmds := make([]rueidis.CacheableTTL, 0, len(rest))
		for _, key := range rest {
			cmds = append(cmds, rueidis.CT(c.B().Get().Key(key).Cache(), flagTTL))
		}
		for _, r := range c.DoMultiCache(cctx, cmds...) {
			read(r)
		}
	}
	return marked
}

// fleetMarked reports whether another instance (or this one) marks k's SKU
// in transit, for a SOLD_OUT about to be answered: from memory, the
// latest flag snapshot's read of the marks (outFlagsIn reads them with
// every flag set); from a script's EMPTY, the marks through the cache.
func (s *Store) fleetMarked(ctx context.Context, c rueidis.Client, k *SKUKeys, fromMemory bool) bool {
	if !s.clientCache {
		return false
	}
	if sn := k.snap.Load(); fromMemory || (sn != nil && sn.marksRead && sn.gen == s.invalGen.Load()) {
		return sn != nil && sn.marked
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.readMarks(cctx, c, k)
}
