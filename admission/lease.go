package admission

import (
	"context"
	"sync"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Fleet admission rate (SPEC §1 step 4). The bucket lives in Redis and is
// refilled on Redis TIME (bucket.lua); each instance leases tokens from it
// in batches and admits from its local lease, so it talks to Redis once per
// batch, not once per request.
//
// Bound: over any interval [t1, t2] the fleet admits at most
// rate*(t2-t1) + burst + L, where L is what was leased out but unspent at
// t1: at most instances * maxBatch (maxBatch = max(1, rate/50), 20 ms of
// the fleet's rate) and never older than leaseTTL, after which an unspent
// lease is dropped. Over the whole sale the fleet admits at most
// rate*T + burst: every admission spends a token the bucket handed out.

// leaseTTL bounds how long a leased token may wait to be spent.
const leaseTTL = time.Second

// leaseWindow is the share of a second one full batch covers (20 ms).
const leaseWindow = 20 * time.Millisecond

type lease struct {
	rate     float64
	burst    int
	maxBatch int64

	mu        sync.Mutex
	tokens    int64
	expires   int64 // ns: unspent tokens are dropped then
	nextFetch int64 // ns: no Redis call before (bucket was short or empty)
	filled    int64 // ns: when the current lease arrived
	batch     int64
	inflight  chan struct{} // non-nil while one request fetches for all
	failed    bool          // the last fetch failed (Redis unreachable)
}

func (l *lease) init(r config.Rate) {
	l.rate, l.burst = r.Rate, r.Burst
	l.maxBatch = max(1, int64(r.Rate*leaseWindow.Seconds()))
	l.batch = max(1, l.maxBatch/4)
}

// stepBack puts the lease's times right after the host's clock stepped
// back (an NTP step, a date set by hand): a wait set by the clock before
// the step would otherwise hold every buy of the activity on this instance
// BUSY for as long as the step, a minute for a minute. Neither time is
// ever set further ahead than this allows (leaseTTL; the longest pace or
// wait the bucket gives: one batch, at most leaseWindow's worth, or one
// token at the rate, plus bucket.lua's rounding up to a millisecond). The
// clock is read under l.mu (take), so no request is late here: one that
// read it before another fetched would be taken for a step back (review
// rv16: every late request of a busy host sent the next one to Redis while
// the fleet bucket was dry), and a slack for such lag held the activity
// BUSY for a real step back as long (review rv17: an 800 ms NTP step at
// 1,000/s, 790 ms BUSY where the bucket's wait was 20 ms).
func (l *lease) stepBack(t int64) {
	if l.expires-t > int64(leaseTTL) {
		l.expires = t + int64(leaseTTL)
	}
	if l.nextFetch-t > int64(max(leaseWindow, time.Duration(float64(time.Second)/l.rate))+2*time.Millisecond) {
		l.nextFetch = t
	}
}

// leaseResult is what take decided.
type leaseResult uint8

const (
	leaseOK leaseResult = iota
	leaseOKFetched
	leaseBusy
	leaseDown
)

// take spends one token, fetching a batch from Redis when the local lease
// is empty. Concurrent requests wait for one fetch instead of each asking.
func (l *lease) take(ctx context.Context, ts TrafficStore, act string, now func() time.Time) (leaseResult, time.Duration) {
	if l.rate <= 0 || ts == nil {
		return leaseOK, 0
	}
	fetched := false
	for attempt := 0; attempt < 3; attempt++ {
		l.mu.Lock()
		t := now().UnixNano() // under the lock: see stepBack
		l.stepBack(t)
		if l.tokens > 0 && t < l.expires {
			l.tokens--
			l.mu.Unlock()
			if fetched {
				return leaseOKFetched, 0
			}
			return leaseOK, 0
		}
		if t < l.nextFetch {
			wait := time.Duration(l.nextFetch - t)
			l.mu.Unlock()
			return leaseBusy, wait
		}
		if ch := l.inflight; ch != nil {
			l.mu.Unlock()
			tm := time.NewTimer(time.Second)
			select {
			case <-ch:
				// The fetch this request waited for failed: Redis is
				// down for it as for the fetcher, not the rate exceeded.
				l.mu.Lock()
				failed := l.failed
				l.mu.Unlock()
				if failed {
					tm.Stop()
					return leaseDown, 0
				}
			case <-tm.C:
			}
			tm.Stop()
			continue
		}
		// Adapt the batch: a lease spent within one window means the
		// instance is hot, so ask for more next time; a slow one, less.
		if l.filled != 0 {
			switch spent := time.Duration(t - l.filled); {
			case spent < leaseWindow:
				l.batch = min(l.maxBatch, l.batch*2)
			case spent > 10*leaseWindow:
				l.batch = max(1, l.batch/2)
			}
		}
		want := l.batch
		ch := make(chan struct{})
		l.inflight = ch
		l.mu.Unlock()

		got, wait, err := ts.LeaseAdmission(ctx, act, l.rate, l.burst, want)
		fetched = true
		l.mu.Lock()
		t = now().UnixNano()
		l.inflight = nil
		l.failed = err != nil
		close(ch)
		if err != nil {
			// Nothing was spent slowly: Redis was down. Without this, every
			// failed fetch of an outage halved the batch, and after it the
			// lease restarted at 1 token while buyers piled up (BUSY).
			l.filled = 0
			l.mu.Unlock()
			return leaseDown, 0
		}
		l.tokens, l.expires, l.filled = got, t+int64(leaseTTL), t
		if got < want {
			// The fleet bucket is short: wait until it has had time to
			// refill this batch before asking again, so a drained bucket
			// does not turn into one Redis call per request.
			pace := time.Duration(float64(want) / l.rate * float64(time.Second))
			l.nextFetch = t + int64(max(pace, wait))
		}
		l.mu.Unlock()
		if got == 0 {
			return leaseBusy, max(wait, time.Millisecond)
		}
	}
	return leaseBusy, retryAfterDefault
}
