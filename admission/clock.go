package admission

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/store"
)

// The clock guard (server.max_clock_skew).
//
// Each instance judges by its own clock the activity window, fair_start
// moments, and the age of every reservation (its reserve's stamp, the
// reconciler's cutoff, a queue worker's "too late to send"). An instance
// whose clock is wrong therefore opens a sale early (a scalper polling
// /_seckill/time finds it), or, minutes behind, stamps winners that another
// instance's reconciler finds older than pending_timeout while the shop is
// still taking their order: released, sold again, two orders for one unit.
// NTP keeps clocks within milliseconds; a VM resumed from a pause, a dead
// time daemon or a hand-set date does not.
//
// So the instance compares its clock with Redis's TIME (every node it
// talks to) every ClockCheckEvery and, while the least the two can differ
// is above the bound, takes no buys (STORE_UNAVAILABLE, nothing reserved;
// the balancer sends the retry to another instance: /readyz is 503 too),
// and its reconciler and queue workers settle nothing. Redis is the one
// clock the whole fleet reads, so instances within the bound of it are
// within twice the bound of each other. A Redis whose own clock is off
// stops every instance: the log and /readyz say which clock to look at.

// ClockCheckEvery is how often the clock is compared with Redis's.
const ClockCheckEvery = 5 * time.Second

// clockRetry is the next check's delay after one no node answered, or one
// that found the clock off: a recovery is seen within it.
const clockRetry = 500 * time.Millisecond

// ClockStore measures Redis's clocks; *store.Store implements it.
type ClockStore interface {
	Clocks(ctx context.Context, now func() time.Time) ([]store.NodeClock, error)
}

var _ ClockStore = (*store.Store)(nil)

// clockGuard is the guard's state.
type clockGuard struct {
	max     atomic.Int64           // server.max_clock_skew in ns; 0: off
	problem atomic.Pointer[string] // non-nil while the clock is off
	host    func() time.Time       // this host's clock (time.Now; tests skew it)
	every   time.Duration          // ClockCheckEvery (tests shorten it)
	checked atomic.Int64           // checks that got an answer
}

// WithHostClock sets the clock the guard compares with Redis's (default
// time.Now). Tests pass the same skewed clock as the pipeline's now.
func WithHostClock(now func() time.Time) Option { return func(p *Pipeline) { p.clock.host = now } }

// WithClockCheckEvery sets how often the clock is compared (tests).
func WithClockCheckEvery(d time.Duration) Option { return func(p *Pipeline) { p.clock.every = d } }

// ClockProblem says why this host's clock is not trusted, "" while it is
// (or the check is off, or no Redis node has answered one yet).
func (p *Pipeline) ClockProblem() string {
	if s := p.clock.problem.Load(); s != nil {
		return *s
	}
	return ""
}

// ClockChecks is how many checks have had an answer from Redis.
func (p *Pipeline) ClockChecks() int64 { return p.clock.checked.Load() }

// clockStepEvery is how often the guard looks, between two checks, for a
// step of this host's clock: its wall clock moving unlike its monotonic one
// (a hand-set date, an NTP step, a VM resumed and corrected). A step sends
// the guard to Redis at once, not up to ClockCheckEvery later: a clock
// that jumps a minute ahead mid-sale would otherwise sell and stamp by it
// for up to 5 s. Reading two clocks ten times a second costs nothing.
const clockStepEvery = 100 * time.Millisecond

// clockStepMin is the least step that sends the guard to Redis early (at
// most half the bound). An NTP slew moves the wall clock against the
// monotonic one by at most 500 ppm: 50 µs per clockStepEvery.
const clockStepMin = 20 * time.Millisecond

// clockWatch sees steps of the host's wall clock against Go's monotonic
// clock (which no one sets) from one reading to the next.
type clockWatch struct {
	mono, wall time.Time
	ok         bool
}

// step is how far the host's wall clock moved unlike the monotonic one
// since the last reading (0 on the first).
func (w *clockWatch) step(host func() time.Time) time.Duration {
	mono, wall := time.Now(), host().Round(0) // Round(0): the wall reading alone
	var d time.Duration
	if w.ok {
		d = wall.Sub(w.wall) - mono.Sub(w.mono)
	}
	w.mono, w.wall, w.ok = mono, wall, true
	return d
}

// runClock checks the clock until ctx ends: every ClockCheckEvery, and at
// once when the host's clock steps.
func (p *Pipeline) runClock(ctx context.Context, cs ClockStore) {
	t := time.NewTimer(0)
	defer t.Stop()
	steps := time.NewTicker(clockStepEvery)
	defer steps.Stop()
	var w clockWatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-steps.C:
			bound := time.Duration(p.clock.max.Load())
			d := w.step(p.clock.host)
			if bound <= 0 || d.Abs() < min(clockStepMin, bound/2) {
				continue
			}
			p.log.Warn("this host's clock stepped: comparing it with Redis's now", zap.Duration("step", d))
		}
		t.Reset(p.CheckClock(ctx, cs))
		w.step(p.clock.host) // the check's own time is not a step
	}
}

// CheckClock compares this host's clock with Redis's once, updates the
// verdict and returns when to check next. serve calls it once before it
// listens, so an instance started with a wrong clock never sells.
func (p *Pipeline) CheckClock(ctx context.Context, cs ClockStore) time.Duration {
	bound := time.Duration(p.clock.max.Load())
	if bound <= 0 {
		p.setClockProblem("")
		return p.clock.every
	}
	nodes, _ := cs.Clocks(ctx, p.clock.host)
	worst, ok, problem := store.JudgeClocks(nodes, bound)
	if !ok {
		// Redis does not answer: buys fail at Redis anyway. The verdict
		// stays as it was (a wrong clock is not trusted again unchecked).
		return clockRetry
	}
	p.clock.checked.Add(1)
	p.m.ClockOffset.Set(worst.Offset.Seconds())
	if problem == "" {
		p.setClockProblem("")
		return p.clock.every
	}
	p.setClockProblem(problem + ": no buys are taken, nothing is reconciled or sent from the queue here until the clocks agree (check NTP: chronyc tracking, timedatectl)")
	return clockRetry
}

func (p *Pipeline) setClockProblem(s string) {
	old := p.clock.problem.Load()
	switch {
	case s == "" && old != nil:
		p.clock.problem.Store(nil)
		p.m.ClockSkewed.Set(0)
		p.log.Info("clock back within server.max_clock_skew of Redis's: buys taken again", zap.String("was", *old))
	case s != "":
		p.clock.problem.Store(&s)
		p.m.ClockSkewed.Set(1)
		if old == nil {
			p.log.Error("clock skew", zap.String("problem", s))
		}
	}
}
