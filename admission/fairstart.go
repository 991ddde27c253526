package admission

import (
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Fair start (issue 13 §1): a buy that arrives in [start, start+fair_start)
// and passes every local check (window, whitelist, flags, signature,
// eligibility, blocklists, rate limits) is held just before the fleet
// admission rate and Redis, and let on at its buyer's release moment in
// [start+fair_start, start+fair_start+spread): uniform over buyers, the
// same for every copy of a buyer's buy on every instance (a keyed hash of
// activity, start and buyer; the key is the fleet's signing secret, so a
// buyer cannot compute theirs). Arriving 300 ms earlier buys nothing, and
// neither do copies: five copies of one buy, or one on each instance, are
// one ticket, not five (red-team finding: a draw per request gave a
// scalper sending 5 copies about 3 times an honest buyer's chance). A buy
// arriving during the spread is held too, until its buyer's moment (or let
// on at once when that has passed): arriving after the window no longer
// jumps ahead of the buyers still held (red-team finding).
//
// Holding costs no goroutine of its own: the buy waits in its fasthttp
// worker (the connection's goroutine) on the channel of its release slot.
// Slots are whole milliseconds; one sleeper per instance closes each
// slot's channel when its moment comes.
//
// A graceful stop (Pipeline.Drain, and Close) answers every held buy 503
// BUSY with Retry-After at once, nothing reserved: never let on early. Let
// on at close, they reached Redis seconds before their release moments and
// before the buys held on every other instance, from an instance already
// refusing new buys, and could reserve after the store began to close
// (red-team finding, TestRC12SigtermReleasesHeldFairStartBuysEarly).

// fairSleepMax bounds the sleeper's naps while buys are held, so a test's
// injected clock that jumps is noticed within this much real time.
const fairSleepMax = 5 * time.Millisecond

// fairPen holds one instance's held buys.
type fairPen struct {
	now  func() time.Time
	max  atomic.Int64
	held atomic.Int64

	heldG          prometheus.Gauge
	released, gone prometheus.Counter
	start          sync.Once
	done           chan struct{}
	closeOnce      sync.Once
	stopping       chan struct{} // closed by drain: held buys are refused
	drainOnce      sync.Once
	wake           chan struct{}
	mu             sync.Mutex
	slots          map[int64]chan struct{} // release ms → closed then
	due            msHeap                  // the slots' ms, earliest first
	key            atomic.Pointer[[]byte]  // the moments' hash key (setKey)
	// reslot is closed (and replaced) when a reload changes the timing of
	// a fair_start window: every held buy takes its moment again by the
	// running config (holdFair).
	reslot atomic.Pointer[chan struct{}]
}

func newFairPen(now func() time.Time, held prometheus.Gauge, releases *prometheus.CounterVec) *fairPen {
	f := &fairPen{now: now, heldG: held, released: releases.WithLabelValues("released"), gone: releases.WithLabelValues("gone"),
		done: make(chan struct{}), stopping: make(chan struct{}), wake: make(chan struct{}, 1), slots: map[int64]chan struct{}{}}
	f.max.Store(config.DefaultFairStartMaxHeld)
	ch := make(chan struct{})
	f.reslot.Store(&ch)
	return f
}

// reslotC is closed when a reload next changes a window's timing.
func (f *fairPen) reslotC() <-chan struct{} { return *f.reslot.Load() }

// wakeToReslot wakes every held buy to take its moment again (Apply, after
// the running config is stored).
func (f *fairPen) wakeToReslot() {
	ch := make(chan struct{})
	close(*f.reslot.Swap(&ch))
}

// setKey sets the key of the buyers' moments: the fleet's current signing
// secret (every instance holds it, no buyer does). Without one the moments
// are still one per buyer and the same on every instance, but a buyer who
// knows the activity's start could compute theirs.
func (f *fairPen) setKey(secret string) {
	k := []byte("seckill-proxy fair_start\x00" + secret)
	f.key.Store(&k)
}

// releaseAt is the release moment of buyer who (their user id, or their
// address when the route has no identity) for activity a, in Unix ms:
// uniform over the spread after the window across buyers, the same for
// every buy of one buyer on every instance. seed is the activity's
// fair_start key from its preheat (store.Flags.FairSeed), the same on
// every instance and across reloads; without one (a preheat by an older
// build) the signing secret keys the moments, and a key rotation during
// the window draws every buyer a second moment (red team rtf).
func (f *fairPen) releaseAt(a *config.Activity, who, seed string) int64 {
	end := a.FairStartEnd().UnixNano()
	spread := int64(a.FairStartSpread)
	if spread <= 0 {
		spread = int64(time.Millisecond)
	}
	var key []byte
	if seed != "" {
		key = []byte("seckill-proxy fair_start seed\x00" + seed)
	} else if k := f.key.Load(); k != nil {
		key = *k
	}
	mac := hmac.New(sha256.New, key)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(a.Start.UnixNano()))
	mac.Write(b[:])
	mac.Write([]byte(a.ID))
	mac.Write([]byte{0})
	mac.Write([]byte(who))
	sum := mac.Sum(nil)
	// Reduced by multiplication (Lemire): uniform enough for any spread
	// (a spread is below 2^40 ns; the bias is under 2^-24).
	hi, _ := bits.Mul64(binary.BigEndian.Uint64(sum), uint64(spread))
	at := end + int64(hi)
	// The slot is the next whole millisecond: released no earlier than drawn.
	return (at + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// enter takes a place in the pen, or reports false when max are held.
func (f *fairPen) enter() bool {
	if f.held.Add(1) > f.max.Load() {
		f.held.Add(-1)
		return false
	}
	f.heldG.Inc()
	return true
}

// leave gives a place back.
func (f *fairPen) leave() {
	f.held.Add(-1)
	f.heldG.Dec()
}

// slot returns the channel closed when the clock reaches ms.
func (f *fairPen) slot(ms int64) <-chan struct{} {
	f.start.Do(func() { go f.run() })
	f.mu.Lock()
	ch, ok := f.slots[ms]
	if !ok {
		ch = make(chan struct{})
		f.slots[ms] = ch
		heap.Push(&f.due, ms)
		if f.due[0] == ms {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
	}
	f.mu.Unlock()
	return ch
}

// run is the one sleeper: it closes each slot's channel once the clock has
// reached it, earliest first.
func (f *fairPen) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var ready []chan struct{}
	for {
		nowMs := f.now().UnixMilli()
		f.mu.Lock()
		for len(f.due) > 0 && f.due[0] <= nowMs {
			ms := heap.Pop(&f.due).(int64)
			ready = append(ready, f.slots[ms])
			delete(f.slots, ms)
		}
		next := int64(-1)
		if len(f.due) > 0 {
			next = f.due[0]
		}
		f.mu.Unlock()
		for i, ch := range ready {
			close(ch)
			ready[i] = nil
		}
		ready = ready[:0]
		var timer <-chan time.Time
		if next >= 0 {
			d := min(time.Duration(next-nowMs)*time.Millisecond, fairSleepMax)
			t.Reset(d)
			timer = t.C
		}
		select {
		case <-timer:
		case <-f.wake:
			if timer != nil && !t.Stop() {
				<-t.C
			}
		case <-f.done:
			// The pen is draining (close drains first): every held buy
			// wakes, sees it and is refused (holdFair); none goes on.
			f.mu.Lock()
			for ms, ch := range f.slots {
				close(ch)
				delete(f.slots, ms)
			}
			f.due = f.due[:0]
			f.mu.Unlock()
			return
		}
	}
}

// drain refuses every buy held now or offered to the pen from now on.
func (f *fairPen) drain() { f.drainOnce.Do(func() { close(f.stopping) }) }

// draining reports whether drain was called.
func (f *fairPen) draining() bool {
	select {
	case <-f.stopping:
		return true
	default:
		return false
	}
}

// close drains the pen and stops its sleeper.
func (f *fairPen) close() {
	f.drain()
	f.closeOnce.Do(func() { close(f.done) })
}

// Drain begins a graceful stop of admission (serve, on SIGTERM): every buy
// held by fair_start is answered 503 BUSY with Retry-After at once, and so
// is every buy that would be held from now on; none of them reserves. A
// held buy is let on only at its release moment, never early, so a stopping
// instance gives its held buyers an answer while its listener is still
// open and sends nothing ahead of the buys held elsewhere. It cannot be
// undone; Close drains too.
func (p *Pipeline) Drain() { p.fair.drain() }

// holdFair holds r until its drawn release moment. It returns done with
// the answer when the buy is not to go on: the pen is full (BUSY, at
// once), the instance is stopping (BUSY, at once or as the stop begins;
// Drain) or the buyer disconnected while held (nothing reserved).
func (p *Pipeline) holdFair(ctx context.Context, r *Request, seed string) (Decision, bool) {
	f := p.fair
	if f.draining() {
		return p.refuse(rFairDrain, retryAfterDefault), true
	}
	if !f.enter() {
		return p.refuse(rFairFull, retryAfterDefault), true
	}
	who, a := fairBuyer(r, p.limits.Load()), r.Activity
hold:
	for {
		rs := f.reslotC()
		select {
		case <-f.slot(f.releaseAt(a, who, seed)):
		case <-f.stopping:
		case <-ctx.Done():
		case <-rs:
			// A reload changed a window's timing (lengthened the spread,
			// say): a buy of the same sale, still fair-started, waits for
			// its moment by the running config, as its copies sent now
			// do (red team rtf: two moments per buyer, and a spread
			// lengthened to meter Redis metered none of the held buys).
			// Otherwise (moved, dropped, fair start off) it goes on now,
			// judged by the running config (Decide).
			switch cur := p.current(r.Activity); {
			case cur == a:
				continue hold // another activity's window
			case cur != nil && cur.FairStart > 0 && cur.Start.Equal(r.Activity.Start):
				a = cur
				continue hold
			}
		}
		break
	}
	f.leave()
	if f.draining() {
		// Woken by the stop, or released in the same moment: refused
		// either way, nothing reserved (another instance, or this one's
		// replacement, takes the retry).
		return p.refuse(rFairDrain, retryAfterDefault), true
	}
	if r.Conn != nil && connGone(r.Conn) {
		f.gone.Inc()
		return p.refuse(rFairGone, 0), true
	}
	f.released.Inc()
	return Decision{}, false
}

// fairBuyer names a held buy's buyer for its moment: the user, or, when
// the route identifies none, the client address cut as the per-IP limiter
// cuts it (limits.ipv6_prefix): an IPv6 client rotating its interface id
// within its /64 draws no new moment.
func fairBuyer(r *Request, l *limiters) string {
	if r.User != "" {
		return "u:" + r.User
	}
	if l != nil {
		return "a:" + l.client(r.IP).String()
	}
	return "a:" + r.IP.String()
}

// msHeap is a min-heap of release slots (Unix ms).
type msHeap []int64

func (h msHeap) Len() int           { return len(h) }
func (h msHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h msHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *msHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *msHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
