// Package preheat runs scheduled preheats: an activity with preheat_at is
// preheated by `serve` at start + preheat_at, once across the fleet, under
// a per-activity Redis lease.
package preheat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Outcomes counted by seckill_scheduled_preheats_total.
const (
	OutcomeError = "error" // a Redis error; retried with backoff
	// OutcomeLost: the stock vanished from Redis after start (a Redis that
	// restarted empty?). Never re-preheated: that would sell it again.
	OutcomeLost = "lost"
	// created, overwritten and unchanged are store.PreheatOutcome's names.
)

// Tuning. They are variables for tests only.
var (
	// maxWait bounds one sleep of the loop, so a stepped wall clock or a
	// missed reload costs at most this much lateness.
	maxWait = time.Second
	// leasePoll is how often an instance looks again while another holds
	// the preheat lease.
	leasePoll = 250 * time.Millisecond
	// watchEvery is how often a preheated activity is looked at between
	// the preheat and start: stock lost before start (Redis restarted
	// empty) is loaded again, since nothing can have been sold yet.
	watchEvery = time.Second
	// minBackoff and maxBackoff bound the retry delay after a Redis error.
	minBackoff = 250 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Options tune a Scheduler.
type Options struct {
	// Now is the clock (default time.Now); tests drive it.
	Now func() time.Time
	// Holder names this instance in the lease and in `status` (default
	// host/pid/start time).
	Holder string
	// Registerer gets seckill_scheduled_preheats_total (nil: not exported).
	Registerer prometheus.Registerer
	// LostSale (reservation.Reconciler.LostSale) is asked before this
	// instance preheats an activity whose window has opened and whose stock
	// it never saw loaded: what the shop holds of a sale Redis lost ("" for
	// none, or when it cannot tell). Nil: not asked.
	LostSale func(ctx context.Context, a *config.Activity, now time.Time) (string, error)
}

// Scheduler preheats the activities of the current config that have
// preheat_at, each once across the fleet, and keeps them ready until start.
type Scheduler struct {
	st     *store.Store
	cfg    func() *config.Config
	log    *zap.Logger
	now    func() time.Time
	holder string
	lost   func(ctx context.Context, a *config.Activity, now time.Time) (string, error)
	runs   *prometheus.CounterVec
	kick   chan struct{}
	state  map[string]*actState // by activity id; only Run's goroutine touches it
}

// actState is one activity's schedule as this instance follows it.
type actState struct {
	moment, start time.Time // the schedule this state is for
	next          time.Time // not before this (lease busy, retry backoff, watch)
	backoff       time.Duration
	seenReady     bool // this instance saw the stock loaded
	done          bool // seen ready at or after start: nothing more to do
}

// New builds a Scheduler over cfg (read on every pass, so reloads apply).
func New(st *store.Store, cfg func() *config.Config, log *zap.Logger, opt Options) *Scheduler {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Holder == "" {
		host, _ := os.Hostname()
		opt.Holder = fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
	}
	s := &Scheduler{
		st: st, cfg: cfg, log: log, now: opt.Now, holder: opt.Holder, lost: opt.LostSale,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_scheduled_preheats_total",
			Help: "Scheduled preheats (preheat_at) run by this instance, by activity and outcome (created, overwritten, unchanged, error, lost).",
		}, []string{"activity", "outcome"}),
		kick:  make(chan struct{}, 1),
		state: map[string]*actState{},
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(s.runs)
	}
	return s
}

// Runs is the scheduler's counter (for tests and callers that export it
// themselves).
func (s *Scheduler) Runs() *prometheus.CounterVec { return s.runs }

// Kick makes Run look at the config again now (call it after a reload).
func (s *Scheduler) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run follows the schedule until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		t.Reset(s.pass(ctx))
	}
}

// pass does what is due and says how long to sleep before the next pass.
func (s *Scheduler) pass(ctx context.Context) time.Duration {
	cfg := s.cfg()
	wait := maxWait
	for i := range cfg.Activities {
		if ctx.Err() != nil {
			return wait
		}
		a := cfg.Activities[i].ShadowOrSelf() // a shadow activity preheats its shadow copy
		moment, ok := a.PreheatMoment()
		now := s.now()
		if !ok || !now.Before(a.End) {
			continue
		}
		st := s.stateFor(a, moment, now)
		if st.done {
			continue
		}
		if now.Before(moment) {
			wait = min(wait, moment.Sub(now))
			continue
		}
		if now.Before(st.next) {
			wait = min(wait, st.next.Sub(now))
			continue
		}
		s.step(ctx, cfg, a, st, moment)
		if !st.done {
			wait = min(wait, max(st.next.Sub(s.now()), 0))
		}
	}
	return wait
}

func (s *Scheduler) stateFor(a *config.Activity, moment, now time.Time) *actState {
	st := s.state[a.ID]
	if st != nil && st.moment.Equal(moment) && st.start.Equal(a.Start) {
		return st
	}
	st = &actState{moment: moment, start: a.Start}
	s.state[a.ID] = st
	s.log.Info("preheat scheduled", zap.String("activity", a.ID), zap.Time("at", moment),
		zap.Duration("preheat_at", a.PreheatAt), zap.Duration("in", max(moment.Sub(now), 0)))
	return st
}

// leaseTTL outlasts one Preheat call (its deadline is 10 × redis.timeout
// + 5 s), so the lease never lapses while its holder is loading stock.
func leaseTTL(cfg *config.Config) time.Duration {
	return 2 * (10*cfg.Redis.Timeout + 5*time.Second)
}

// LeaseName is the Redis lease every preheat of one activity runs under
// (store.Preheat takes it too: a manual preheat waits for a scheduled one).
func LeaseName(act string) string { return store.PreheatLease(act) }

// step preheats a, due now, unless it is ready already or another
// instance holds the lease.
func (s *Scheduler) step(ctx context.Context, cfg *config.Config, a *config.Activity, st *actState, moment time.Time) {
	now := s.now()
	rec, err := s.st.PreheatRecord(ctx, a.ID)
	if err != nil {
		s.failed(a, st, now, "read", err)
		return
	}
	// Stock an earlier sale of the same id left (its keys live on for
	// key_ttl_after_end) is not this sale's: the preheat below decides
	// (red-team finding re15: taken as loaded, the new sale opened on the
	// old, sold-out stock with the old buyers at their limit).
	if rec.Ready && !rec.ForEarlierSale(a) {
		s.sawReady(a, st, now, rec)
		return
	}
	if st.seenReady && !now.Before(a.Start) && !rec.Loading {
		// Sold stock would be sold again: a person must decide (status,
		// reconcile, then preheat --force). A preheat loading the stock
		// (by hand, or one that stopped midway) is not that: the lease
		// below waits for it, or finishes it.
		s.log.Error("stock of a running activity is gone from Redis (restarted empty?); not preheating it again, which could oversell: check status and reconcile, then preheat --force by hand",
			zap.String("activity", a.ID))
		s.runs.WithLabelValues(a.ID, OutcomeLost).Inc()
		st.done = true
		return
	}
	if !st.seenReady && !now.Before(a.Start) && !rec.Loading && s.lost != nil {
		// This instance started after the loss: it cannot tell lost stock
		// from stock never loaded, but the shop's count can (red team rtb).
		lost, err := s.lost(ctx, a, now)
		if err != nil {
			s.failed(a, st, now, "count", err)
			return
		}
		if lost != "" {
			s.log.Error("not preheating a running activity the shop holds orders of: "+lost+"; check status and reconcile, then preheat --force by hand",
				zap.String("activity", a.ID))
			s.runs.WithLabelValues(a.ID, OutcomeLost).Inc()
			st.done = true
			return
		}
	}
	held, err := s.st.TryLease(ctx, LeaseName(a.ID), s.holder, leaseTTL(cfg))
	if err != nil {
		s.failed(a, st, now, "lease", err)
		return
	}
	if !held {
		// Another instance is preheating: look again shortly.
		st.next = now.Add(leasePoll)
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.st.ReleaseLease(rctx, LeaseName(a.ID), s.holder); err != nil {
			s.log.Debug("preheat lease not released; it expires on its own", zap.String("activity", a.ID), zap.Error(err))
		}
	}()
	// Under the lease: whoever held it before may have finished since.
	if rec, err = s.st.PreheatRecord(ctx, a.ID); err != nil {
		s.failed(a, st, now, "read", err)
		return
	}
	if rec.Ready && !rec.ForEarlierSale(a) {
		s.sawReady(a, st, now, rec)
		return
	}
	out, err := s.st.PreheatLocked(ctx, a, false, s.now())
	if err != nil {
		s.failed(a, st, now, "preheat", err)
		return
	}
	if err := s.st.MarkScheduledPreheat(ctx, a.ID, s.holder); err != nil {
		s.log.Warn("preheated, but not marked as scheduled (status shows it as by hand)", zap.String("activity", a.ID), zap.Error(err))
	}
	s.runs.WithLabelValues(a.ID, out.String()).Inc()
	var units int64
	for _, k := range a.SKUs {
		units += k.Stock
	}
	s.log.Info("scheduled preheat", zap.String("activity", a.ID), zap.Stringer("outcome", out),
		zap.Int("skus", len(a.SKUs)), zap.Int64("units", units), zap.Int("shards", a.Shards),
		zap.Time("scheduled_at", moment), zap.Duration("late", max(now.Sub(moment), 0)), zap.Time("start", a.Start))
	st.backoff = 0
	s.ready(a, st, now)
}

// sawReady notes stock loaded by another instance or by hand.
func (s *Scheduler) sawReady(a *config.Activity, st *actState, now time.Time, rec store.PreheatRecord) {
	st.backoff = 0
	if !st.seenReady {
		by := "by hand"
		if rec.ScheduledBy != "" {
			by = "by " + rec.ScheduledBy
		}
		s.log.Info("activity already preheated", zap.String("activity", a.ID), zap.String("by", by), zap.Time("at", rec.At))
	}
	s.ready(a, st, now)
}

func (s *Scheduler) ready(a *config.Activity, st *actState, now time.Time) {
	st.seenReady = true
	if !now.Before(a.Start) {
		st.done = true
		return
	}
	// Until start, look again now and then, and once at start.
	st.next = now.Add(watchEvery)
	if a.Start.Before(st.next) {
		st.next = a.Start
	}
}

func (s *Scheduler) failed(a *config.Activity, st *actState, now time.Time, what string, err error) {
	st.backoff = min(max(2*st.backoff, minBackoff), maxBackoff)
	st.next = now.Add(st.backoff)
	s.runs.WithLabelValues(a.ID, OutcomeError).Inc()
	if errors.Is(err, store.ErrRunning) {
		// Not Redis trouble: a person must decide (the error says what).
		s.log.Error("scheduled preheat refused; retrying", zap.String("activity", a.ID), zap.String("step", what),
			zap.Duration("retry_in", st.backoff), zap.Error(err))
		return
	}
	s.log.Warn("scheduled preheat failed; retrying", zap.String("activity", a.ID), zap.String("step", what),
		zap.Duration("retry_in", st.backoff), zap.Error(err))
}
