// Package inflight keeps the shop's in-flight budget (issue 11 §1,
// upstream.max_inflight): how many winners of one activity may be in
// flight to the shop at once, for the whole fleet of proxy instances.
//
// The budget lives in Redis (lua/inflight.lua). Each instance holds a
// number of slots under a lease and hands them to its own senders (sync
// winners, queue workers) from memory: a finished request's slot goes
// straight to a sender waiting here while the instance is within its fair
// share, and back to the fleet otherwise. One goroutine per activity talks
// to Redis, one call at a time, carrying everything that changed since the
// last one (slots wanted, given back, the lease renewal, an adaptive
// limit), so Redis sees at most one call per round trip per instance.
//
// Bounds (README, "Protecting the shop"):
//   - The fleet never has more than the limit in flight: a slot is used
//     only while its lease outlives the request (upstream.timeout) and the
//     hold after it, and Redis hands out no more than the limit across the
//     live leases. A lower limit (reload, adaptive) takes effect as
//     requests finish.
//   - A request whose outcome is unknown (no answer came: a timeout, the
//     connection cut after sending) keeps its slot for one more
//     upstream.timeout: the shop may still be working on it (the window
//     config.MinPendingTimeout allows for), and the next winner sent in
//     its place would put the shop above the limit.
//   - A crashed instance's slots come back when its lease expires,
//     2 × upstream.timeout + 2 s after its last renewal (LimitsOf).
//   - Each budget holds its slots in Redis under a name of its own (the
//     instance's, and a generation): a budget retired by a reload drains
//     under its name while a new one, when the bound comes back, counts
//     what it still holds as another instance's.
//   - A slot is never leaked: what an instance holds in Redis is set, not
//     counted up and down, from what it really uses at each call.
package inflight

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Store is what the budget needs of Redis; *store.Store implements it.
type Store interface {
	SyncInflight(ctx context.Context, act string, q store.InflightSync) (store.InflightGrant, error)
}

var _ Store = (*store.Store)(nil)

// Result is what Acquire got.
type Result uint8

const (
	// Got is a slot: send, then call Done.
	Got Result = iota
	// Full means no slot came free within the wait.
	Full
	// Down means the fleet's budget could not be reached (Redis): no slot.
	Down
)

func (r Result) String() string {
	switch r {
	case Got:
		return "got"
	case Full:
		return "full"
	case Down:
		return "down"
	}
	return "invalid"
}

// Outcome is how a request sent under a slot ended, for the adaptive limit.
type Outcome uint8

const (
	// Answered: the shop answered (a 2xx, or a refusal like 4xx).
	Answered Outcome = iota
	// Overloaded: the shop timed out, failed (5xx) or said it is
	// overloaded (429): an adaptive limit backs off.
	Overloaded
	// NotSent: nothing reached the shop (the connection could not be made):
	// no latency to learn from.
	NotSent
	// Unknown: the request may have reached the shop and no answer came
	// (a timeout, the connection cut after sending). The shop may still be
	// working on it: the slot stays taken for one more SendWithin
	// (upstream.timeout), then comes back. An adaptive limit backs off as
	// for Overloaded.
	Unknown
)

// Slot is one winner's place in flight, from Acquire to Done.
type Slot struct {
	counted bool
	// Waited is true when the slot came only after waiting for one to
	// come free.
	Waited bool
}

// Limits are one activity's budget settings (upstream.*).
type Limits struct {
	// Max is the fleet's limit; with Adaptive the estimate's upper bound.
	Max int64
	// Min is the adaptive estimate's lower bound.
	Min      int64
	Adaptive bool
	// TTL is the lease; SendWithin the longest one request takes
	// (upstream.timeout). A slot stays taken up to 2 × SendWithin (the
	// request, then the hold after an Unknown outcome): it is handed out
	// only while the lease outlives that.
	TTL, SendWithin time.Duration
}

// LimitsOf reads an upstream config's limits. The lease is
// config.InflightTTL (upstream.timeout + 2 s) plus one more
// upstream.timeout for the hold after an unknown outcome: it outlives a
// slot's longest use by the same 2 s.
func LimitsOf(u *config.Upstream) Limits {
	return Limits{Max: int64(u.MaxInflight), Min: int64(u.MinInflight), Adaptive: u.Adaptive,
		TTL: u.InflightTTL() + u.Timeout, SendWithin: u.Timeout}
}

// takenFor is the longest a slot stays taken once handed out: the request
// (SendWithin), then the hold after an Unknown outcome (SendWithin again).
func (l Limits) takenFor() time.Duration { return 2 * l.SendWithin }

// renewEvery is how often a lease in use is renewed: a quarter of what it
// outlives a slot's longest use by, so three renewals may fail before it
// runs out.
func (l Limits) renewEvery() time.Duration { return max((l.TTL-l.takenFor())/4, 10*time.Millisecond) }

// usableFor is how long after a renewal's start a slot may still be handed
// out: one handed out then is given back (its hold included) before the
// lease renewed then expires, though the renewals after fail.
func (l Limits) usableFor() time.Duration { return l.TTL - l.takenFor() - l.renewEvery() }

// pollEvery is how often an instance with senders waiting asks the fleet
// again (slots given back elsewhere come to it no later than that).
const pollEvery = 10 * time.Millisecond

// pollDown is the pause between calls while Redis does not answer.
const pollDown = 100 * time.Millisecond

// Budget is one activity's in-flight budget as this instance sees it.
type Budget struct {
	act  string
	inst string
	st   Store
	log  *zap.Logger

	inUse, limitGauge prometheus.Gauge

	kick   chan struct{}
	done   chan struct{}
	exited chan struct{}

	mu          sync.Mutex
	lim         Limits
	used        int64       // slots this instance's senders use (holds included)
	holds       []time.Time // when each slot held after an Unknown outcome comes back
	held        int64       // slots the fleet's budget counts for this instance
	fair        int64       // its fair share at the last call; -1 before the first
	limit       int64       // the limit in force at the last call
	total       int64       // slots the fleet held at the last call
	reported    int64       // the demand the fleet knows of this instance
	usableUntil time.Time
	renewed     time.Time
	waiters     list.List // *waiter, first come first served
	round       uint64    // calls to Redis started
	est         *gradient // upstream.adaptive; nil otherwise
	propose     int64     // an adaptive limit to publish (0: none)
	retired     bool      // max_inflight removed: no bound; drain and stop
	closed      bool      // stopped: no more slots
	killed      bool
}

type waiter struct {
	ch      chan struct{}
	try     bool   // wait for one call to the fleet, no longer
	after   uint64 // the last round started before it came
	granted bool
	counted bool
	down    bool
	el      *list.Element
}

func newBudget(act, inst string, st Store, lim Limits, inUse, limitGauge prometheus.Gauge, log *zap.Logger) *Budget {
	b := &Budget{act: act, inst: inst, st: st, log: log, inUse: inUse, limitGauge: limitGauge,
		kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}), fair: -1}
	b.setLimits(lim)
	go b.run()
	return b
}

// setLimits applies (new) limits; called with b.mu held or before run.
func (b *Budget) setLimits(lim Limits) {
	b.lim = lim
	switch {
	case lim.Adaptive && b.est == nil:
		// Start from the floor: the shop's capacity is unknown until it
		// has been measured, and a slow start costs winners a queue
		// wait, a fast one may cost the shop.
		b.est = newGradient(float64(lim.Min), float64(lim.Max))
		b.limit = lim.Min
	case lim.Adaptive:
		b.est.min, b.est.max = float64(lim.Min), float64(lim.Max)
		if l := b.est.clamp(b.est.est); l != b.est.est {
			b.est.est, b.propose = l, int64(math.Round(l))
		}
	default:
		b.est, b.limit = nil, lim.Max
	}
	b.limitGauge.Set(float64(b.limit))
}

// Acquire takes a slot for one request to the shop. It waits at most wait
// for one to come free (0: only for one look at the fleet's budget), and
// no longer than ctx.
func (b *Budget) Acquire(ctx context.Context, wait time.Duration) (Slot, Result) {
	now := time.Now()
	b.mu.Lock()
	if b.retired {
		b.mu.Unlock()
		return Slot{}, Got
	}
	if b.closed {
		b.mu.Unlock()
		return Slot{}, Down
	}
	if b.roomLocked() && now.Before(b.usableUntil) && b.waiters.Len() == 0 {
		b.used++
		b.inUse.Set(float64(b.used))
		b.mu.Unlock()
		return Slot{counted: true}, Got
	}
	w := &waiter{ch: make(chan struct{}), try: wait <= 0, after: b.round}
	w.el = b.waiters.PushBack(w)
	b.kickLocked()
	b.mu.Unlock()

	if wait <= 0 {
		// One call to Redis answers it; the bound is for a stuck one.
		wait = 5 * time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ch:
	case <-t.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case w.granted:
		return Slot{counted: w.counted, Waited: !w.try}, Got
	case w.el != nil:
		b.waiters.Remove(w.el)
		w.el = nil
		if b.held > b.used {
			b.kickLocked() // a slot granted meanwhile goes back
		}
	}
	if w.down {
		return Slot{}, Down
	}
	return Slot{}, Full
}

// Done gives a slot back: rtt is the request's time at the shop, out how it
// ended. The slot goes to a sender waiting here while this instance is
// within its fair share, else back to the fleet; after an Unknown outcome
// (or an Overloaded one that lasted SendWithin: a timeout) only once the
// hold has run out.
func (b *Budget) Done(s Slot, rtt time.Duration, out Outcome) {
	if !s.counted {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	inFlight := max(b.total, b.used)
	if out == Overloaded && rtt >= b.lim.SendWithin {
		// It took the whole upstream.timeout: no answer came in time,
		// whatever the sender made of it (a queue worker's timeout).
		out = Unknown
	}
	if out == Unknown {
		// The shop may still be working on it: taken until then. The
		// budget's goroutine gives it back (nextWake, expireHoldsLocked).
		b.holds = append(b.holds, now.Add(b.lim.SendWithin))
		b.kickLocked()
	} else {
		b.used--
	}
	if b.est != nil && out != NotSent {
		if l, ok := b.est.sample(now, rtt, out == Overloaded || out == Unknown, inFlight); ok {
			if p := int64(math.Round(l)); p != b.limit {
				b.propose = p
				b.kickLocked()
			}
		}
	}
	b.freedLocked(now)
}

// freedLocked hands slots that came free to the senders waiting here, or
// has the goroutine give them back to the fleet.
func (b *Budget) freedLocked(now time.Time) {
	if b.waiters.Len() > 0 && b.roomLocked() && now.Before(b.usableUntil) {
		b.grantLocked()
	} else if b.held > b.used {
		b.kickLocked()
	}
	b.inUse.Set(float64(b.used))
}

// expireHoldsLocked gives back the slots held after an Unknown outcome
// whose hold has run out.
func (b *Budget) expireHoldsLocked(now time.Time) {
	n := 0
	for _, until := range b.holds {
		if now.Before(until) {
			b.holds[n] = until
			n++
		}
	}
	if n == len(b.holds) {
		return
	}
	b.used -= int64(len(b.holds) - n)
	b.holds = b.holds[:n]
	b.freedLocked(now)
}

// roomLocked reports whether one more sender may go on what this instance
// holds: within the slots held, the limit in force (lowered by a reload
// before the fleet hears of it) and its fair share (others are waiting).
func (b *Budget) roomLocked() bool {
	return b.used < b.held && b.used < b.limit && (b.fair < 0 || b.used < b.fair)
}

// grantLocked hands free held slots to waiters, first come first served.
func (b *Budget) grantLocked() {
	for b.roomLocked() && b.waiters.Len() > 0 {
		w := b.waiters.Remove(b.waiters.Front()).(*waiter)
		w.el, w.granted, w.counted = nil, true, true
		b.used++
		close(w.ch)
	}
	b.inUse.Set(float64(b.used))
}

func (b *Budget) kickLocked() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Limit is the fleet's limit in force as this instance last heard it.
func (b *Budget) Limit() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit
}

// InUse is how many slots this instance's senders use now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// run is the budget's one conversation with Redis.
func (b *Budget) run() {
	defer close(b.exited)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			b.mu.Lock()
			killed := b.killed
			b.mu.Unlock()
			if !killed {
				b.sync(true)
			}
			return
		case <-b.kick:
		case <-t.C:
		}
		b.mu.Lock()
		b.expireHoldsLocked(time.Now())
		b.mu.Unlock()
		next, stop := b.sync(false)
		if stop {
			return
		}
		t.Reset(next)
	}
}

// sync makes a few calls to the fleet's budget until this instance holds
// what it should; it returns when to call again, and stop once a retired
// budget has given everything back.
func (b *Budget) sync(closing bool) (next time.Duration, stop bool) {
	for i := 0; i < 4; i++ {
		b.mu.Lock()
		if b.killed {
			b.mu.Unlock()
			return time.Hour, true
		}
		demand := b.used + int64(b.waiters.Len())
		if closing || b.retired {
			demand = b.used
		}
		want := demand
		if b.fair >= 0 && b.fair < b.reported {
			// Held to a share while others wait: ask no more than it (the
			// script works it out again with everyone's demand now).
			want = min(want, b.fair)
		}
		want = max(min(want, b.limit), b.used)
		heartbeat := (b.held > 0 || b.used > 0) && time.Since(b.renewed) >= b.lim.renewEvery()
		if want == b.held && demand == b.reported && b.waiters.Len() == 0 && b.propose == 0 && !heartbeat && !closing {
			stop, next := b.retired && b.held == 0 && b.used == 0, b.nextWake()
			b.mu.Unlock()
			return next, stop
		}
		if want < b.held {
			// Given back from now on: no sender may take them meanwhile.
			b.held = want
		}
		b.round++
		round := b.round
		q := store.InflightSync{Instance: b.inst, Floor: b.held, Want: want, Demand: demand, TTL: b.lim.TTL}
		switch {
		case b.est == nil:
			q.Limit, q.SetLimit = b.lim.Max, true
		case b.propose > 0:
			q.Limit, q.SetLimit = b.propose, true
		default:
			q.Limit = b.limit
		}
		b.mu.Unlock()

		start := time.Now()
		g, err := b.st.SyncInflight(context.Background(), b.act, q)

		b.mu.Lock()
		if err != nil {
			b.failTriesLocked(round, true)
			b.mu.Unlock()
			if closing {
				b.log.Warn("in-flight budget: could not give slots back; they return when the lease expires",
					zap.String("activity", b.act), zap.Duration("lease", b.lim.TTL), zap.Error(err))
			}
			return pollDown, false
		}
		b.held, b.fair, b.total = g.Held, g.Fair, g.Total
		if q.SetLimit && q.Limit == b.propose {
			b.propose = 0
		}
		if g.Limit != b.limit {
			b.limit = g.Limit
			if b.est != nil {
				if l := b.est.follow(float64(g.Limit)); int64(math.Round(l)) != g.Limit {
					b.propose = int64(math.Round(l)) // stored by another config's bounds
				}
			}
			b.limitGauge.Set(float64(g.Limit))
		}
		b.renewed, b.usableUntil = start, start.Add(b.lim.usableFor())
		if b.retired {
			for b.waiters.Len() > 0 { // no bound any more: go
				w := b.waiters.Remove(b.waiters.Front()).(*waiter)
				w.el, w.granted = nil, true
				close(w.ch)
			}
		}
		b.grantLocked()
		b.failTriesLocked(round, false)
		b.reported = demand
		// Again at once when slots came back during the call (give them
		// back), or senders came who were not counted in it.
		waiting := int64(b.waiters.Len())
		again := b.held > b.used+waiting || (waiting > 0 && b.used+waiting > demand) || b.propose > 0
		if closing || !again {
			stop := b.retired && b.held == 0 && b.used == 0
			next := b.nextWake()
			b.mu.Unlock()
			return next, stop
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nextWake(), false
}

// failTriesLocked answers the senders that asked for one look at the fleet
// (Acquire with no wait) and were counted in call round, granted nothing.
func (b *Budget) failTriesLocked(round uint64, down bool) {
	for e := b.waiters.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); w.try && w.after < round {
			b.waiters.Remove(e)
			w.el, w.down = nil, down
			close(w.ch)
		}
		e = next
	}
}

// nextWake is when to call Redis next with nothing asked: soon while
// senders wait, at the renewal period while slots are held.
// A slot held after an Unknown outcome wakes it when its hold runs out.
func (b *Budget) nextWake() time.Duration {
	next := time.Hour
	switch {
	case b.waiters.Len() > 0:
		next = pollEvery
	case b.held > 0 || b.used > 0:
		next = max(b.lim.renewEvery()-time.Since(b.renewed), time.Millisecond)
	}
	for _, until := range b.holds {
		next = min(next, max(time.Until(until), time.Millisecond))
	}
	return next
}

// retire lifts the bound (max_inflight removed): every sender goes at
// once, and the slots held are given back as their requests finish.
func (b *Budget) retire() {
	b.mu.Lock()
	b.retired = true
	b.kickLocked()
	b.mu.Unlock()
}

// close gives every slot not in use back and stops; kill stops without a
// word to Redis, as a crash would.
func (b *Budget) close(kill bool) {
	b.mu.Lock()
	b.killed, b.closed = kill, true
	for b.waiters.Len() > 0 {
		w := b.waiters.Remove(b.waiters.Front()).(*waiter)
		w.el, w.down = nil, true
		close(w.ch)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
	default:
		close(b.done)
	}
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
	}
}

// Fleet holds this instance's budgets, one per activity with a bound.
type Fleet struct {
	st   Store
	m    inflightMetrics
	log  *zap.Logger
	inst string

	mu      sync.Mutex
	budgets map[string]*Budget
	gen     uint64 // budgets made: each one's lease name in Redis
	closed  bool
}

type inflightMetrics struct {
	inUse, limit *prometheus.GaugeVec
}

// NewFleet builds the budgets' holder; instance names this process in the
// fleet ("" picks a unique one). inUse and limit are the gauges of
// metrics.Metrics.Inflight and InflightLimit.
func NewFleet(st Store, inUse, limit *prometheus.GaugeVec, log *zap.Logger, instance string) *Fleet {
	if instance == "" {
		instance = InstanceName()
	}
	return &Fleet{st: st, m: inflightMetrics{inUse, limit}, log: log, inst: instance, budgets: map[string]*Budget{}}
}

// InstanceName is a name unique to this process: host, pid and a random part.
func InstanceName() string {
	host, _ := os.Hostname()
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}

// Instance is this process's name in the fleet.
func (f *Fleet) Instance() string { return f.inst }

// Apply gives every activity of cfg its budget when upstream.max_inflight
// is set (keeping the slots of one that exists), and lifts the bound of
// the others.
func (f *Fleet) Apply(cfg *config.Config) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	lim := LimitsOf(&cfg.Upstream)
	keep := map[string]bool{}
	if lim.Max > 0 {
		for i := range cfg.Activities {
			keep[cfg.Activities[i].ID] = true
			f.setLocked(cfg.Activities[i].ID, lim)
		}
	}
	for id, b := range f.budgets {
		if !keep[id] {
			b.retire()
			delete(f.budgets, id)
		}
	}
}

// Set gives activity act a budget with lim (lim.Max 0: no bound).
func (f *Fleet) Set(act string, lim Limits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if lim.Max > 0 {
		f.setLocked(act, lim)
	} else if b := f.budgets[act]; b != nil {
		b.retire()
		delete(f.budgets, act)
	}
}

func (f *Fleet) setLocked(act string, lim Limits) {
	if b := f.budgets[act]; b != nil {
		b.mu.Lock()
		b.setLimits(lim)
		b.kickLocked()
		b.mu.Unlock()
		return
	}
	// A name of its own: a budget of act retired by an earlier reload may
	// still drain (winners at the shop, slots held after an unknown
	// outcome). Under the same name the two would overwrite each other's
	// record in Redis: this one would not count the other's slots, and the
	// other's last call would delete this one's (red-team finding,
	// TestRA12ReloadToggleInflightTwiceShopAboveLimit).
	f.gen++
	name := f.inst + "#" + strconv.FormatUint(f.gen, 10)
	f.budgets[act] = newBudget(act, name, f.st, lim, f.m.inUse.WithLabelValues(act), f.m.limit.WithLabelValues(act), f.log)
}

// Budget is activity act's budget, nil when its winners are not bounded.
func (f *Fleet) Budget(act string) *Budget {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.budgets[act]
}

// Close gives back every slot not in use and stops the budgets.
func (f *Fleet) Close() { f.stop(false) }

// Kill stops the budgets without a word to Redis, as a crash would: their
// slots come back when the leases expire. For tests.
func (f *Fleet) Kill() { f.stop(true) }

func (f *Fleet) stop(kill bool) {
	f.mu.Lock()
	bs := f.budgets
	f.budgets, f.closed = map[string]*Budget{}, true
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Add(1)
		go func() { defer wg.Done(); b.close(kill) }()
	}
	wg.Wait()
}
