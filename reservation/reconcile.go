// Package reservation settles reservations after admission: the
// reconciler that finds reservations pending too long, asks the shop
// whether their order exists, confirms or releases them, and compares
// Redis with the shop; and the queue-mode workers that forward queued
// reservations to the shop at a bounded rate (queue.go).
package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Verdict is what the shop said about one reservation's order.
type Verdict string

// Verdicts.
const (
	OrderExists Verdict = "exists"  // verify answered 200
	OrderAbsent Verdict = "absent"  // verify answered 404
	Unverified  Verdict = "unknown" // no verify configured, or any other answer
)

// Sentinel errors.
var (
	// ErrLeaseHeld means another instance holds the reconciler lease: a
	// repairing pass did not run.
	ErrLeaseHeld = errors.New("another reconciler holds the lease")
	// ErrLeaseLost means the lease was taken over during a pass (this
	// holder was paused or cut off); the pass stopped repairing.
	ErrLeaseLost = errors.New("reconciler lease lost during the pass")
	// ErrClockSkewed means this host's clock is not trusted (server.
	// max_clock_skew): a repairing pass did not run.
	ErrClockSkewed = errors.New("this host's clock is not trusted: no repair")
)

// LeaseName is the Redis lease one repairing reconciler holds at a time.
const LeaseName = "reconciler"

// leaseTTL bounds how long a holder that could not give the lease back
// blocks every other repairing pass: one killed mid-pass, or one whose
// let-go reached no master (Redis stalled, or failing over: a let-go
// answered by the stopped master it was queued on, after its replica was
// promoted, is dropped with that node's writes). Shorter than
// DefaultLeaseWait, so the CLI's next run outwaits it (red team chaos seed
// 325: at 2 minutes every reconcile was refused for the rest of a sale
// after a failover). A pass keeps it by renewing it in the background
// (hold), however long one of its steps takes.
var leaseTTL = 20 * time.Second // a var only so a test can shorten it

// DefaultLeaseWait is how long `reconcile --repair` waits for the lease
// by default (--lease-wait): longer than leaseTTL.
const DefaultLeaseWait = 30 * time.Second

// Grace is how long after an activity's end differences within tolerance
// are only noted; after it, any difference alerts.
const Grace = time.Hour

// Finding is one stale pending reservation and what was (or would be) done.
type Finding struct {
	Token   string  `json:"token"`
	User    string  `json:"user"`
	Qty     int64   `json:"qty"`
	AgeMs   int64   `json:"age_ms"`
	Verdict Verdict `json:"verdict"`
	OrderID string  `json:"order_id,omitempty"`
	Action  string  `json:"action"` // confirmed, released, would-confirm, would-release, left
	Detail  string  `json:"detail,omitempty"`
}

// settled reports whether the finding left the reservation settled.
func (f Finding) settled() bool { return f.Action == "confirmed" || f.Action == "released" }

// SKUReport is one SKU's counters as Redis holds them, what the shop says,
// and the differences found.
type SKUReport struct {
	store.SKUStatus
	// ShopCount is the units the shop holds tokened orders for, where
	// verify.count_url tells; absent otherwise.
	ShopCount *int64 `json:"shop_count,omitempty"`
	// Unsettled is the units of reservations pending beyond
	// pending_timeout that this pass left pending.
	Unsettled int64 `json:"unsettled"`
	// Tolerance is max(5 units, 0.1% of initial): differences within it
	// are noted while the activity runs, alerted beyond it.
	Tolerance int64 `json:"tolerance"`
}

// ActivityReport is the reconciler's view of one activity.
type ActivityReport struct {
	ID string `json:"id"`
	// Phase is upcoming, running, ended (within Grace of the end) or
	// closed (beyond it: any difference alerts).
	Phase        string      `json:"phase"`
	SKUs         []SKUReport `json:"skus"`
	Stale        []Finding   `json:"stale_pending"`
	MovesSettled int         `json:"moves_settled"`
	Notes        []string    `json:"notes,omitempty"`
	Alerts       []string    `json:"alerts,omitempty"`
	// Exceptions are the pass's findings with their evidence; a repairing
	// pass records them in the activity's exceptions stream (a report-only
	// pass only shows them).
	Exceptions []store.Exception `json:"exceptions,omitempty"`
	// ExceptionsRecorded is how many of them were new to the stream.
	ExceptionsRecorded int `json:"exceptions_recorded,omitempty"`
}

// Report is one reconciler pass.
type Report struct {
	Repair bool `json:"repair"`
	// Fence is the fencing token the repairs ran under (0: report only).
	Fence      int64            `json:"fence,omitempty"`
	Activities []ActivityReport `json:"activities"`
}

// Alerting reports whether anything needs a person.
func (r Report) Alerting() bool {
	for _, a := range r.Activities {
		if len(a.Alerts) > 0 {
			return true
		}
	}
	return false
}

// Reconciler compares Redis with the shop and, with repair, settles what
// the shop can prove. It never guesses: without verify it only reports.
type Reconciler struct {
	st        *store.Store
	http      *http.Client
	m         *metrics.Metrics
	log       *zap.Logger
	holder    string
	leaseWait time.Duration
	// leaseTTL is this reconciler's lease TTL (0: the package's leaseTTL).
	leaseTTL time.Duration
	// exceptionsMax bounds each activity's exceptions stream.
	exceptionsMax int
	// clock says why this host's clock is not trusted ("" when it is):
	// a repairing Run refuses then (WithClockCheck).
	clock func() string
}

// NewReconciler builds a Reconciler. Its lease holder name is unique to
// this process and instance.
func NewReconciler(st *store.Store, m *metrics.Metrics, log *zap.Logger) *Reconciler {
	return &Reconciler{st: st, http: &http.Client{Timeout: 5 * time.Second, CheckRedirect: noRedirects}, m: m, log: log, holder: instanceName(),
		exceptionsMax: config.DefaultExceptionsMax}
}

// noRedirects makes an http.Client answer a redirect as it is: a verify
// URL (or a queue worker's buy) answered 3xx is judged by that 3xx, never
// by the page it points at (a login page's 200 read as "the order
// exists", a moved path's 404 as "absent": red-team finding).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// WithExceptionsMax bounds each activity's exceptions stream to about n
// entries (reconcile.exceptions_max).
func (r *Reconciler) WithExceptionsMax(n int) *Reconciler {
	r.exceptionsMax = n
	return r
}

// WithClockCheck makes a repairing Run refuse (ErrClockSkewed) while
// problem says something: ages judged by a wrong clock release winners the
// shop is still taking, or keep stale ones (server.max_clock_skew; serve
// passes its clock guard's verdict).
func (r *Reconciler) WithClockCheck(problem func() string) *Reconciler {
	r.clock = problem
	return r
}

// WithLeaseWait makes a repairing Run wait up to d for the lease held by
// another instance (the CLI does; the background pass simply skips).
func (r *Reconciler) WithLeaseWait(d time.Duration) *Reconciler {
	r.leaseWait = d
	return r
}

// WithLeaseTTL sets how long this reconciler's lease outlives its last
// renewal (default leaseTTL, 20 s: how long a holder killed mid-pass keeps
// every other reconciler out). serve keeps the default; the chaos harness
// shortens it to see the next holder take over (docs/decisions.md §57).
func (r *Reconciler) WithLeaseTTL(d time.Duration) *Reconciler {
	r.leaseTTL = d
	return r
}

// Holder is the name this reconciler holds the lease under.
func (r *Reconciler) Holder() string { return r.holder }

func (r *Reconciler) ttl() time.Duration {
	if r.leaseTTL > 0 {
		return r.leaseTTL
	}
	return leaseTTL
}

// moveSettleAge is how old an unsettled stock move must be before the
// reconciler deposits it: far beyond any admission call's deadline.
const moveSettleAge = 30 * time.Second

// stalePage is how many pending-index entries the reconciler reads at a
// time; a pass pages through all of them.
const stalePage = 500

// Run does one pass over acts. With repair it first takes the reconciler
// lease (ErrLeaseHeld when another instance has it) and every repair
// carries the lease's fencing token.
func (r *Reconciler) Run(ctx context.Context, acts []*config.Activity, repair bool, now time.Time) (Report, error) {
	rep := Report{Repair: repair}
	if repair && r.clock != nil {
		if p := r.clock(); p != "" {
			return rep, fmt.Errorf("%w: %s", ErrClockSkewed, p)
		}
	}
	if repair {
		l, err := r.acquire(ctx)
		if err != nil {
			if !errors.Is(err, ErrLeaseHeld) {
				// A lease call whose reply never came (a Redis blip) may
				// still run: it would hold the lease for a pass that gave
				// up, and keep every other reconciler out for leaseTTL
				// (red team chaos). Give up what it may take.
				r.letGo()
			}
			return rep, err
		}
		rep.Fence = l.Token
		var stop func()
		ctx, stop = r.hold(ctx, l.Token)
		defer func() { stop(); r.letGo() }()
	}
	for _, a := range acts {
		ar, err := r.activity(ctx, a, repair, rep.Fence, now)
		if err != nil {
			return rep, fmt.Errorf("reconcile %s: %w", a.ID, whyStopped(ctx, err))
		}
		if repair {
			n, err := r.st.RecordExceptions(ctx, a.ID, ar.Exceptions, r.exceptionsMax, store.ExpireAt(a))
			ar.ExceptionsRecorded = n
			if err != nil {
				return rep, fmt.Errorf("reconcile %s: recording exceptions: %w", a.ID, whyStopped(ctx, err))
			}
		}
		rep.Activities = append(rep.Activities, ar)
	}
	return rep, nil
}

// letGo releases the lease if this reconciler holds it, with 2 s of its
// own for the call and its retries (ReleaseLease), whatever the pass's
// context says.
func (r *Reconciler) letGo() {
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.st.ReleaseLease(cctx, LeaseName, r.holder)
}

func (r *Reconciler) acquire(ctx context.Context) (store.Lease, error) {
	deadline := time.Now().Add(r.leaseWait)
	for {
		l, err := r.st.AcquireLease(ctx, LeaseName, r.holder, r.ttl())
		if err != nil {
			return l, err
		}
		if l.Held {
			return l, nil
		}
		if time.Now().After(deadline) {
			return l, ErrLeaseHeld
		}
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hold keeps a repairing pass's lease while it runs: renewed every quarter
// of its TTL in a goroutine of its own, so no step of the pass outlasts it
// (a verify call of up to 5 s, or three of them for one reservation while
// trust is checked; a count_url call per SKU; red team RV15: renewed between
// steps only, a slow count_url lost it). A renewal that finds the lease
// gone or another's, or none answered for a whole TTL (it may have
// expired), ends the pass: the returned context is cancelled with
// ErrLeaseLost (its fenced repairs would be refused anyway once another
// holder starts). stop ends the renewals.
func (r *Reconciler) hold(ctx context.Context, fence int64) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(r.ttl() / 4)
		defer tk.Stop()
		renewed := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			switch err := r.renew(ctx, fence); {
			case err == nil:
				renewed = time.Now()
			case errors.Is(err, ErrLeaseLost) || time.Since(renewed) >= r.ttl():
				cancel(ErrLeaseLost)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// whyStopped is ErrLeaseLost for an error of a pass hold ended (what its
// cancelled calls say is not why), else err.
func whyStopped(ctx context.Context, err error) error {
	if lost := context.Cause(ctx); errors.Is(lost, ErrLeaseLost) {
		return lost
	}
	return err
}

// renew takes the lease again for its holder: ErrLeaseLost when it is
// gone or another's.
func (r *Reconciler) renew(ctx context.Context, fence int64) error {
	l, err := r.st.AcquireLease(ctx, LeaseName, r.holder, r.ttl())
	if err != nil {
		return err
	}
	if !l.Held || l.Token != fence {
		return ErrLeaseLost
	}
	return nil
}

// Tolerance is the difference, in units, noted rather than alerted while
// an activity runs: max(5 units, 0.1% of its stock).
func Tolerance(initial int64) int64 { return max(5, (initial+999)/1000) }

func phase(a *config.Activity, now time.Time) string {
	switch {
	case now.Before(a.Start):
		return "upcoming"
	case now.Before(a.End):
		return "running"
	case now.Before(a.End.Add(Grace)):
		return "ended"
	}
	return "closed"
}

func (r *Reconciler) activity(ctx context.Context, a *config.Activity, repair bool, fenceToken int64, now time.Time) (ActivityReport, error) {
	ar := ActivityReport{ID: a.ID, Phase: phase(a, now)}
	f, err := r.st.Flags(ctx, a.ID)
	if err != nil {
		return ar, err
	}
	if !f.Ready {
		st, err := r.st.Status(ctx, a)
		for _, k := range st.SKUs {
			ar.SKUs = append(ar.SKUs, SKUReport{SKUStatus: k, Tolerance: Tolerance(k.Initial)})
		}
		if err != nil {
			return ar, err
		}
		// A sale Redis lost (restarted empty, keys evicted) reads as one
		// never preheated; the shop's count tells them apart.
		switch lost, err := r.LostSale(ctx, a, now); {
		case err != nil:
			ar.Notes = append(ar.Notes, fmt.Sprintf("not preheated inside its window, and the shop's count is unavailable: %v", err))
		case lost != "":
			r.alert(&ar, "shop_extra", lost+"; a plain preheat refuses to load it again, preheat --force would put those units on sale a second time")
		}
		return ar, nil
	}
	// SKUs dropped from the config after preheat still hold reservations:
	// they are settled like the others (the activity's verify.url still
	// answers for them), and named.
	held, dropped, err := r.st.WithHeldSKUs(ctx, a)
	if err != nil {
		return ar, err
	}
	for _, id := range dropped {
		ar.Notes = append(ar.Notes, fmt.Sprintf("sku %s: not in the config, but Redis holds its stock (preheated before it was dropped): its reservations are settled as the others; its keys expire with the activity's", id))
	}
	var fence *store.Fence
	if repair {
		// The keys live until the running file's end + key_ttl_after_end:
		// a reload or restart that moved either later, with no preheat
		// after it, left them expiring by the preheat's file, before a
		// reservation pending at the new end could be settled here.
		if err := r.st.KeepKeysFor(ctx, a); err != nil {
			return ar, err
		}
		fence = &store.Fence{Token: fenceToken, ExpireAt: store.ExpireAt(a)}
		if err := r.st.FenceShards(ctx, a, f.Shards, *fence); err != nil {
			return ar, leaseErr(err)
		}
		n, err := r.st.SettleMovesFenced(ctx, withShards(held, f.Shards), moveSettleAge, now, *fence)
		if err != nil {
			return ar, leaseErr(err)
		}
		ar.MovesSettled = n
	}
	cutoff := now.Add(-a.PendingTimeout).UnixMilli()
	unsettled := map[string]int64{}
	// Per-reservation evidence of what stays unsettled, graded with its SKU.
	unsettledEx := map[string][]store.Exception{}
	// Bundles' reservations (token SKU store.BundleSKU) are settled too,
	// whole, even when the config no longer has a bundle_route.
	skuIDs := make([]string, 0, len(held.SKUs)+1)
	for _, k := range held.SKUs {
		skuIDs = append(skuIDs, k.ID)
	}
	skuIDs = append(skuIDs, store.BundleSKU)
	vt := &verifyTrust{skus: skuIDs}
	// One pass over each shard's pending index for every SKU (red team
	// cat16: a pass per SKU read every SKU's entries of the shared index,
	// SKUs × pending).
	{
		err := r.st.StalePendingOf(ctx, a.ID, skuIDs, f.Shards, cutoff, stalePage, func(skuID string, stale []store.Reservation) error {
			for _, res := range stale {
				fd, err := r.settle(ctx, a, f.Shards, res, fence, now, vt)
				if err != nil {
					return err
				}
				if !fd.settled() {
					// A bundle's units count under each item's SKU.
					for _, it := range r.unitsOf(ctx, skuID, res, f.Shards) {
						unsettled[it.SKU] += it.Qty
						unsettledEx[it.SKU] = append(unsettledEx[it.SKU], store.Exception{Activity: a.ID, Kind: "unsettled", SKU: it.SKU,
							Token: fd.Token, User: fd.User, Qty: it.Qty, State: res.State, Shop: shopAnswer(fd), At: now,
							Reason: unsettledReason(fd)})
					}
				}
				if fd.Detail == detailReleasedWithOrder {
					msg := fmt.Sprintf("sku %s: %s: the shop holds order %s for a released reservation", skuID, fd.Token, fd.OrderID)
					r.alert(&ar, "order_for_released", msg)
					ar.Exceptions = append(ar.Exceptions, store.Exception{Activity: a.ID, Kind: "order_for_released", Severity: "alert",
						SKU: skuID, Token: fd.Token, User: fd.User, Qty: fd.Qty, State: store.StateReleased, Shop: shopAnswer(fd), At: now, Reason: msg})
				}
				if n := len(vt.deferred); n > 0 && vt.deferred[n-1].res.Token == res.Token {
					vt.deferred[n-1].stale = len(ar.Stale)
				}
				ar.Stale = append(ar.Stale, fd)
			}
			return nil
		})
		if err != nil {
			return ar, err
		}
	}
	if a.Verify.URL != "" {
		if err := r.recheckReleased(ctx, &ar, a, f.Shards, repair, now, vt); err != nil {
			return ar, err
		}
	}
	if err := r.settleByCount(ctx, &ar, a, fence, f.Shards, now, vt, unsettled, unsettledEx); err != nil {
		return ar, err
	}
	if vt.problem != "" {
		r.alert(&ar, "verify_untrusted", vt.problem)
	}
	if vt.existsProblem != "" {
		r.alert(&ar, "verify_untrusted", vt.existsProblem)
	}
	// Sync-mode winners may wait in the queue too (upstream.overflow:
	// queue), so every activity's queue is looked at.
	if len(a.SKUs) > 0 {
		r.queueAge(ctx, &ar, a, f.Shards, now)
		r.queueOrphans(ctx, &ar, a, f.Shards, now, repair)
	}
	st, err := r.st.Status(ctx, a)
	if err != nil {
		return ar, err
	}
	for _, k := range st.SKUs {
		sr := SKUReport{SKUStatus: k, Unsettled: unsettled[k.ID], Tolerance: Tolerance(k.Initial)}
		if a.Verify.CountURL != "" && k.Preheated {
			n, err := r.shopCount(ctx, a.Verify.CountURL, a.ID, k.ID)
			if err != nil {
				ar.Notes = append(ar.Notes, fmt.Sprintf("sku %s: shop count unavailable: %v", k.ID, err))
			} else {
				sr.ShopCount = &n
			}
		}
		r.compare(&ar, a, sr, unsettledEx[k.ID], now)
		ar.SKUs = append(ar.SKUs, sr)
	}
	return ar, nil
}

// droppedPendingAge is how long a reservation of an activity no longer in
// the config must have been pending before Dropped reports it: the
// default pending_timeout (the activity's own went with its config).
const droppedPendingAge = 10 * time.Minute

// Dropped reports the activities Redis still holds stock for (preheated,
// keys not yet expired) that known, the config's every activity, does not
// name: removed from the file during or after the sale. Their pending
// reservations are never settled, since nothing says which shop to ask
// (verify.url went with the config): each one pending beyond
// droppedPendingAge is listed, and alerted. Activities with nothing
// pending and their invariant kept are left out (a file cleaned up after
// a sale). Read only: it needs no lease.
func (r *Reconciler) Dropped(ctx context.Context, known []*config.Activity, now time.Time) ([]ActivityReport, error) {
	ids := make([]string, len(known))
	for i, a := range known {
		ids[i] = a.ID
	}
	acts, err := r.st.DroppedActivities(ctx, ids, now)
	if err != nil {
		return nil, err
	}
	var out []ActivityReport
	for _, a := range acts {
		ar := ActivityReport{ID: a.ID, Phase: "not in the config"}
		var units int64
		skuIDs := make([]string, 0, len(a.SKUs)+1)
		for _, k := range a.SKUs {
			skuIDs = append(skuIDs, k.ID)
		}
		{
			err := r.st.StalePendingOf(ctx, a.ID, append(skuIDs, store.BundleSKU), a.Shards, now.Add(-droppedPendingAge).UnixMilli(), stalePage, func(_ string, stale []store.Reservation) error {
				for _, res := range stale {
					units += res.Qty
					ar.Stale = append(ar.Stale, Finding{Token: res.Token.String(), User: res.User, Qty: res.Qty, AgeMs: now.UnixMilli() - res.CreatedMs,
						Verdict: Unverified, Action: "left", Detail: "activity not in the config: no verify.url to ask"})
				}
				return nil
			})
			if err != nil {
				return out, fmt.Errorf("activity %s (not in the config): %w", a.ID, err)
			}
		}
		st, err := r.st.Status(ctx, a)
		if err != nil {
			return out, fmt.Errorf("activity %s (not in the config): %w", a.ID, err)
		}
		var pending int64
		for _, k := range st.SKUs {
			k.NotInConfig = true
			pending += k.Pending
			ar.SKUs = append(ar.SKUs, SKUReport{SKUStatus: k, Tolerance: Tolerance(k.Initial)})
			if !k.OK {
				r.alert(&ar, "invariant", fmt.Sprintf("sku %s: %s", k.ID, k.Problem))
			}
		}
		if len(ar.Stale) > 0 {
			r.alert(&ar, "unsettled", fmt.Sprintf("activity %s is not in the config, but Redis holds %d reservation(s) of it (%d units) pending for over %s, e.g. %s: nothing settles them; put the activity back in the config (with its verify.url) and run reconcile --repair",
				a.ID, len(ar.Stale), units, droppedPendingAge, ar.Stale[0].Token))
		} else if pending > 0 {
			ar.Notes = append(ar.Notes, fmt.Sprintf("activity %s is not in the config, but Redis holds %d unit(s) of it pending: put it back in the config (with its verify.url) so they are settled", a.ID, pending))
		}
		if len(ar.Alerts) > 0 || len(ar.Notes) > 0 {
			out = append(out, ar)
		}
	}
	return out, nil
}

// queueAge alerts when the oldest queued reservation (never sent, so
// never the reconciler's to settle) has waited longer than pending_timeout
// plus what a full backlog takes to drain at queue.rate: no worker is
// taking the queue (every instance's workers down, or stuck), and its
// buyers, told QUEUED, hear nothing.
func (r *Reconciler) queueAge(ctx context.Context, ar *ActivityReport, a *config.Activity, shards int, now time.Time) {
	ms, found, err := r.st.OldestQueued(ctx, a.ID, a.SKUs[0].ID, shards)
	if err != nil {
		ar.Notes = append(ar.Notes, fmt.Sprintf("queue age unavailable: %v", err))
		return
	}
	if !found {
		return
	}
	limit := a.PendingTimeout
	if a.Queue.Rate > 0 {
		limit += time.Duration(float64(a.Queue.MaxBacklog) / a.Queue.Rate * float64(time.Second))
	}
	if waited := now.Sub(time.UnixMilli(ms)); waited > limit {
		msg := fmt.Sprintf("the oldest queued reservation has waited %s without being sent (limit %s = pending_timeout + max_backlog / queue.rate): are the queue workers running?",
			waited.Round(time.Second), limit.Round(time.Second))
		r.alert(ar, "queued_stale", msg)
		ar.Exceptions = append(ar.Exceptions, store.Exception{Activity: a.ID, Kind: "queued_stale", Severity: "alert",
			SKU: a.SKUs[0].ID, State: store.StateQueued, At: now, Reason: msg})
	}
}

// orphanAge is the least time a queued reservation may go without its
// stream entry before the reconciler releases it: its buyer's call
// enqueues it right after the reserve reply, or retries while Redis does
// not answer. The activity's pending_timeout, when longer, is the horizon:
// the one after which a sync sale's unaccounted reservation is settled
// too, so a live instance's retried enqueue lands first after any Redis
// outage shorter than that.
const orphanAge = time.Minute

// queueOrphans finds queued reservations that never got their stream entry
// within max(orphanAge, pending_timeout) of their reserve: no worker can
// see them. Their buyers were
// told STORE_UNAVAILABLE (the reserve's reply never came and its abort could
// not land) or, rarer, QUEUED (the enqueue never landed before its instance
// stopped or while it stayed cut off); Redis cannot tell which, and sending
// would place an order for a buyer told nothing is held. With repair they
// are released (reason "unlisted"; store.ReleaseOrphans); without, reported.
func (r *Reconciler) queueOrphans(ctx context.Context, ar *ActivityReport, a *config.Activity, shards int, now time.Time, repair bool) {
	toks, err := r.st.ReleaseOrphans(ctx, a.ID, shards, now.Add(-max(orphanAge, a.PendingTimeout)).UnixMilli(), now.UnixMilli(), repair)
	if err != nil {
		ar.Notes = append(ar.Notes, fmt.Sprintf("queued reservations without a stream entry: not checked: %v", err))
		return
	}
	if len(toks) == 0 {
		return
	}
	action := "held until released: run with --repair"
	if repair {
		action = "released (reason " + store.OrphanReason + "): never sent, the units back on sale"
	}
	ar.Notes = append(ar.Notes, fmt.Sprintf("%d queued reservation(s) had no stream entry %s after their reserve (a reserve whose reply was lost and whose abort could not land, or an instance that stopped before enqueueing): %s", len(toks), max(orphanAge, a.PendingTimeout), action))
	for _, t := range toks {
		ar.Exceptions = append(ar.Exceptions, store.Exception{Activity: a.ID, Kind: "queued_unlisted", Severity: "note",
			SKU: t.SKU, Token: t.String(), State: store.StateQueued, At: now, Reason: action})
	}
}

func leaseErr(err error) error {
	if errors.Is(err, store.ErrFenced) {
		return ErrLeaseLost
	}
	return err
}

// compare grades one SKU's differences. Redis holding more than it
// should (the invariant broken, stock for orders that exist) is alerted
// and never fixed automatically; pending reservations the shop cannot
// account for are graded by size and phase; the shop holding fewer orders
// than confirmed is graded the same way, for a person to look at.
func (r *Reconciler) compare(ar *ActivityReport, a *config.Activity, k SKUReport, unsettled []store.Exception, now time.Time) {
	if !k.Preheated {
		return
	}
	shopCount := ""
	if k.ShopCount != nil {
		shopCount = "count=" + strconv.FormatInt(*k.ShopCount, 10)
	}
	skuEx := func(kind, severity string, qty int64, msg string) {
		ar.Exceptions = append(ar.Exceptions, store.Exception{Activity: a.ID, Kind: kind, Severity: severity, SKU: k.ID,
			Qty: qty, Shop: shopCount, At: now, Reason: msg})
	}
	if !k.OK {
		msg := fmt.Sprintf("sku %s: %s", k.ID, k.Problem)
		r.alert(ar, "invariant", msg)
		skuEx("invariant", "alert", 0, msg)
	}
	strict := ar.Phase == "closed"
	grade := func(kind string, diff int64, what string) string {
		if diff == 0 {
			return ""
		}
		msg := fmt.Sprintf("sku %s: %s: %d units (tolerance %d, activity %s)", k.ID, what, diff, k.Tolerance, ar.Phase)
		if strict || diff > k.Tolerance {
			r.alert(ar, kind, msg)
			return "alert"
		}
		ar.Notes = append(ar.Notes, msg)
		r.log.Warn("reconcile note", zap.String("activity", a.ID), zap.String("note", msg))
		return "note"
	}
	// Unsettled reservations are kept one by one, with the SKU's grade.
	if sev := grade("unsettled", k.Unsettled, "reservations pending beyond pending_timeout that the shop could not settle"); sev != "" {
		for _, e := range unsettled {
			e.Severity = sev
			ar.Exceptions = append(ar.Exceptions, e)
		}
	}
	if k.ShopCount != nil {
		shop := *k.ShopCount
		// Only a shortfall is missing: the shop holding more than confirmed
		// is its orders for pending reservations, or shop_extra below.
		if sev := grade("shop_missing", max(k.Confirmed-shop, 0), "shop holds fewer units in orders than Redis confirmed"); sev != "" {
			skuEx("shop_missing", sev, k.Confirmed-shop, fmt.Sprintf("shop holds %d units in orders, Redis confirmed %d", shop, k.Confirmed))
		}
		if extra := shop - k.Confirmed - k.Pending; extra > 0 {
			// Orders the reservation book does not hold: their stock went
			// back on sale. Redis holds more than it should; never auto-fixed.
			msg := fmt.Sprintf("sku %s: shop holds %d units in orders beyond confirmed+pending", k.ID, extra)
			r.alert(ar, "shop_extra", msg)
			skuEx("shop_extra", "alert", extra, fmt.Sprintf("shop holds %d units in orders, Redis confirmed %d and has %d pending", shop, k.Confirmed, k.Pending))
		}
	}
}

// shopAnswer is a stale reservation's verify verdict as evidence.
func shopAnswer(f Finding) string {
	if f.OrderID != "" {
		return string(f.Verdict) + " order_id=" + f.OrderID
	}
	return string(f.Verdict)
}

func unsettledReason(f Finding) string {
	if f.Detail != "" {
		return "pending beyond pending_timeout, " + f.Action + ": " + f.Detail
	}
	return "pending beyond pending_timeout, " + f.Action
}

func (r *Reconciler) alert(ar *ActivityReport, kind, msg string) {
	ar.Alerts = append(ar.Alerts, msg)
	r.m.ReconcileAlerts.WithLabelValues(ar.ID, kind).Inc()
	r.log.Error("reconcile alert", zap.String("activity", ar.ID), zap.String("kind", kind), zap.String("alert", msg))
}

func withShards(a *config.Activity, shards int) *config.Activity {
	if a.Shards == shards {
		return a
	}
	c := *a
	c.Shards = shards
	return &c
}

const detailReleasedWithOrder = "order exists but the reservation was released"

// settle asks the shop about one stale reservation and, with a fence
// (repair), acts on a definite answer.
func (r *Reconciler) settle(ctx context.Context, a *config.Activity, shards int, res store.Reservation, fence *store.Fence, now time.Time, vt *verifyTrust) (Finding, error) {
	f := Finding{Token: res.Token.String(), User: res.User, Qty: res.Qty, AgeMs: now.UnixMilli() - res.CreatedMs, Action: "left"}
	if res.State == store.StateQueued {
		// Never in the pending index (claim.lua adds it when sent); were one
		// there, the shop could not know it yet: "absent" proves nothing.
		f.Verdict, f.Detail = Unverified, "queued, not sent yet"
		return f, nil
	}
	if a.Verify.URL == "" {
		f.Verdict, f.Detail = Unverified, "no verify.url configured: reported, never guessed"
		return f, nil
	}
	f.Verdict, f.OrderID, f.Detail = verifyOrder(ctx, r.http, a.Verify.URL, f.Token)
	if f.Verdict == OrderAbsent {
		if p := r.trustVerify(ctx, a, shards, vt); p != "" {
			f.Verdict, f.Detail = Unverified, "verify.url said absent, but is not trusted: "+p
			return f, nil
		}
		if vt.byCount {
			if res.Token.SKU == store.BundleSKU {
				// Left: its items' counts would decide it only if the shop
				// counts bundles' items under their SKUs, which nothing
				// checks; a pass after the sale's first confirm decides it.
				f.Detail = detailBundleAbsentByCount
				// Its units are denied too (countOverConfirmed): pending
				// under its items' SKUs, they must not stand for the
				// orders a count above confirmed may be.
				for _, it := range r.unitsOf(ctx, store.BundleSKU, res, shards) {
					vt.deny(it.SKU, it.Qty)
				}
				return f, nil
			}
			f.Detail = detailAbsentByCount
			vt.deferred = append(vt.deferred, deferredAbsent{res: res})
			vt.deny(res.Token.SKU, res.Qty)
			return f, nil
		}
	}
	if f.Verdict == OrderExists {
		if p := r.trustExists(ctx, a, res.Token, vt); p != "" {
			f.Verdict, f.Detail = Unverified, "verify.url said exists, but is not trusted: "+p
			return f, nil
		}
	}
	if fence == nil {
		switch f.Verdict {
		case OrderExists:
			f.Action = "would-confirm"
		case OrderAbsent:
			f.Action = "would-release"
		}
		return f, nil
	}
	var code lua.Code
	var err error
	switch f.Verdict {
	case OrderExists:
		code, err = r.st.ConfirmFenced(ctx, res.Token, shards, f.OrderID, *fence)
		f.Action, f.Detail = actionOf("confirmed", code, err)
		if err == nil && code == lua.Released {
			f.Detail = detailReleasedWithOrder
		}
		r.m.Settlements.WithLabelValues("reconcile_confirm", code.String()).Inc()
	case OrderAbsent:
		code, err = r.releaseAbsent(ctx, &f, res, shards, *fence, now)
	default:
		return f, nil
	}
	if err == nil && code == lua.Fenced {
		return f, ErrLeaseLost
	}
	return f, nil
}

// releasedRecheck is the least time after a release on verify's 404 during
// which later passes ask verify about it again (the activity's
// pending_timeout when longer): ~15 of serve's passes, far beyond a
// replica's lag or a slow commit.
const releasedRecheck = 15 * time.Minute

// recheckPage bounds how many such releases one pass asks about again
// (newest first): verify may take seconds a call.
const recheckPage = 100

// recheckReleased asks verify again about reservations a pass released on
// its 404. The shop holding an order for one now (verify read from a
// replica that lagged, or before the shop's insert committed) means its
// unit was sold twice: the reservation stays released (the unit is most
// likely sold again; an operator decides), order_for_released is alerted
// and recorded, and it is not asked about again. Found by nothing before:
// a released reservation is in no pending index (red-team finding,
// TestRV15VerifyLag...).
func (r *Reconciler) recheckReleased(ctx context.Context, ar *ActivityReport, a *config.Activity, shards int, repair bool, now time.Time, vt *verifyTrust) error {
	horizon := max(releasedRecheck, a.PendingTimeout)
	toks, err := r.st.VerifyReleased(ctx, a.ID, now.Add(-horizon).UnixMilli(), now.UnixMilli(), recheckPage, repair)
	if err != nil {
		ar.Notes = append(ar.Notes, fmt.Sprintf("reservations released on verify's 404: not asked about again: %v", err))
		return nil
	}
	for _, tok := range toks {
		v, oid, detail := verifyOrder(ctx, r.http, a.Verify.URL, tok.String())
		if v == Unverified {
			// Verify is not answering (each call may take its 5 s
			// timeout): the rest are asked next pass, not at 5 s each now.
			ar.Notes = append(ar.Notes, fmt.Sprintf("reservations released on verify's 404: asking again stopped this pass: verify.url did not answer for %s (%s)", tok, detail))
			return nil
		}
		if v != OrderExists || r.trustExists(ctx, a, tok, vt) != "" {
			continue // absent, or a 200 not to be believed: asked again next pass
		}
		res, ok, err := r.st.Lookup(ctx, tok, shards)
		if err != nil || !ok || res.State != store.StateReleased {
			continue
		}
		msg := fmt.Sprintf("sku %s: %s: the shop holds order %s for a reservation released when verify.url said it had none (a verify read from a lagging replica, or before the shop's order committed?): its unit may have sold twice; cancel one order or take the unit off sale", tok.SKU, tok, oid)
		r.alert(ar, "order_for_released", msg)
		f := Finding{Token: tok.String(), User: res.User, Qty: res.Qty, Verdict: OrderExists, OrderID: oid}
		ar.Exceptions = append(ar.Exceptions, store.Exception{Activity: a.ID, Kind: "order_for_released", Severity: "alert",
			SKU: tok.SKU, Token: f.Token, User: res.User, Qty: res.Qty, State: store.StateReleased, Shop: shopAnswer(f), At: now, Reason: msg})
		if repair {
			if err := r.st.ForgetVerifyReleased(ctx, tok); err != nil {
				r.log.Warn("reconcile: an alerted release not forgotten: alerted again next pass", zap.String("token", tok.String()), zap.Error(err))
			}
		}
	}
	return nil
}

// verifyTrust is one pass's check of an activity's verify.url against a
// reservation the shop confirmed, made once, at the first "absent".
type verifyTrust struct {
	skus    []string // the activity's SKUs (and store.BundleSKU)
	checked bool
	problem string // "" when verify may be taken at its word that an order is absent
	// byCount: no confirmed reservation to check verify against, and
	// verify.count_url set: its "absent" answers wait in deferred for the
	// shop's count after the pass (settleByCount).
	byCount  bool
	deferred []deferredAbsent
	// denied: units, by SKU, verify said absent in such a pass: the
	// deferred single buys, and the bundles' items (left pending).
	denied map[string]int64
	// existsChecked and existsProblem are the same for its word that an
	// order exists, checked at the first "exists" (trustExists).
	existsChecked bool
	existsProblem string
}

// releaseAbsent releases a stale reservation verify said the shop holds no
// order for. Conditional on the send stamp verify judged: a queue worker's
// takeover may have re-claimed and re-sent it meanwhile (claim.lua SAME
// re-stamps it), and that send the shop may still take.
func (r *Reconciler) releaseAbsent(ctx context.Context, f *Finding, res store.Reservation, shards int, fence store.Fence, now time.Time) (lua.Code, error) {
	code, err := r.st.ReleaseFenced(ctx, res.Token, shards, "verify_absent", now.UnixMilli(), true, res.CreatedMs, fence)
	f.Action, f.Detail = actionOf("released", code, err)
	r.m.Settlements.WithLabelValues("reconcile_release", code.String()).Inc()
	if err == nil && code == lua.OK {
		// Asked about again on later passes (recheckReleased): a 404
		// from a lagging replica is taken for "absent" here too.
		if nerr := r.st.NoteVerifyReleased(ctx, res.Token, now.UnixMilli(), fence.ExpireAt); nerr != nil {
			r.log.Warn("reconcile: a release on verify's 404 not noted for a second look: a lagging verify's order for it will not be alerted",
				zap.String("token", f.Token), zap.Error(nerr))
		}
	}
	return code, err
}

// deferredAbsent is a stale reservation verify said absent while there was
// no confirmed reservation to check verify against: settled, or not, by
// the shop's count after the pass (settleByCount).
type deferredAbsent struct {
	res   store.Reservation
	stale int // its finding's index in ActivityReport.Stale
}

// deny notes n units of sku that verify said absent (vt.denied).
func (vt *verifyTrust) deny(sku string, n int64) {
	if vt.denied == nil {
		vt.denied = map[string]int64{}
	}
	vt.denied[sku] += n
}

const detailAbsentByCount = "verify.url said absent; no confirmed reservation to check it against: decided by count_url after the pass"

const detailBundleAbsentByCount = "verify.url said absent; no confirmed reservation to check it against, and count_url counts SKUs, not bundles: left until a pass finds one confirmed"

// settleByCount decides the "absent" answers verify gave while no
// reservation of the sale was confirmed to check it against (vt.byCount).
// A 404 for everything (a wrong path) would release buys the shop holds:
// the shop's count tells. Per SKU, Redis's confirmed units are read first,
// then the shop's count: every order of a reservation confirmed by then is
// in that count, so a count above them is an order of a pending
// reservation, perhaps one verify said the shop does not hold. Then
// nothing of the SKU is released on verify's word (alerted or noted by
// countOverConfirmed: younger pending buys may be all it is). A count at most
// the confirmed units (the pass's own confirms included) means the shop
// holds no order of any pending reservation: its 404s are true, released.
// A report-only pass confirms nothing; the reservations verify said exist
// count beside the confirmed ones there (what a repair would confirm).
func (r *Reconciler) settleByCount(ctx context.Context, ar *ActivityReport, a *config.Activity, fence *store.Fence, shards int, now time.Time, vt *verifyTrust,
	unsettled map[string]int64, unsettledEx map[string][]store.Exception) error {
	if len(vt.deferred) == 0 {
		return nil
	}
	st, err := r.st.Status(ctx, a)
	if err != nil {
		return err
	}
	confirmed := map[string]int64{}
	for _, k := range st.SKUs {
		confirmed[k.ID] = k.Confirmed
	}
	if fence == nil {
		// A bundle's units are its items' (red team rv16: counted under
		// "*", a would-confirmed bundle's items in the shop's count read
		// as orders verify denied, and a true 404 was alerted).
		// Only one still pending after Status was read (review rv18: one
		// confirmed meanwhile, its late answer or another instance's
		// repair, is in Status already; counted twice, it explained away
		// an order verify denied, and the report said would-release where
		// a repair leaves it). Read after Status: a confirm in between
		// leaves it out, which only makes the count look higher.
		for _, f := range ar.Stale {
			if f.Action == "would-confirm" {
				if t, err := store.ParseToken(f.Token); err == nil {
					if res, ok, err := r.st.Lookup(ctx, t, shards); err != nil || !ok || res.State != store.StatePending {
						continue
					}
					for _, it := range r.unitsOf(ctx, t.SKU, store.Reservation{Token: t, Qty: f.Qty}, shards) {
						confirmed[it.SKU] += it.Qty
					}
				}
			}
		}
	}
	verdict := map[string]string{} // SKU → "" (released) or why not
	over := map[string]int64{}     // SKU → the shop's count, above confirmed
	verdictOf := func(sku string) string {
		if why, seen := verdict[sku]; seen {
			return why
		}
		var why string
		switch n, err := r.shopCount(ctx, a.Verify.CountURL, a.ID, sku); {
		case err != nil:
			why = fmt.Sprintf("no confirmed reservation to check verify.url against, and count_url did not answer for sku %s (%v): nothing is released on its word this pass", sku, err)
		case n > confirmed[sku]:
			// Alerted, or noted, after the pass (below): younger pending
			// reservations may hold those orders.
			over[sku] = n
			why = fmt.Sprintf("no confirmed reservation to check verify.url against, and count_url says the shop holds %d unit(s) of sku %s in orders while Redis confirmed %d: a pending reservation holds the rest, perhaps one verify.url said absent; nothing of the SKU is released on its word this pass", n, sku, confirmed[sku])
		}
		verdict[sku] = why
		return why
	}
	// A finding left unsettled keeps its exception, whose evidence was
	// taken when it was deferred ("decided by count_url after the pass"):
	// it says what was decided.
	evidence := func(sku string, f *Finding) {
		for i := range unsettledEx[sku] {
			if unsettledEx[sku][i].Token == f.Token {
				unsettledEx[sku][i].Shop, unsettledEx[sku][i].Reason = shopAnswer(*f), unsettledReason(*f)
			}
		}
	}
	for _, d := range vt.deferred { // single buys only (see settle)
		sku := d.res.Token.SKU
		why := verdictOf(sku)
		f := &ar.Stale[d.stale]
		if why != "" {
			f.Verdict, f.Detail = Unverified, "verify.url said absent, but is not trusted: "+why
			evidence(sku, f)
			continue
		}
		if fence == nil {
			// Not settled: counted unsettled, as any would-release is.
			f.Action, f.Detail = "would-release", ""
			evidence(sku, f)
			continue
		}
		if code, err := r.releaseAbsent(ctx, f, d.res, shards, *fence, now); err == nil && code == lua.Fenced {
			return ErrLeaseLost
		}
		if f.Action != "released" {
			evidence(sku, f) // left: already settled, re-stamped, or an error
			continue
		}
		unsettled[sku] -= f.Qty
		ex := unsettledEx[sku][:0]
		for _, e := range unsettledEx[sku] {
			if e.Token != f.Token {
				ex = append(ex, e)
			}
		}
		unsettledEx[sku] = ex
	}
	return r.countOverConfirmed(ctx, ar, a, vt, over)
}

// countOverConfirmed says what a shop count above the confirmed units
// means (over: SKU → count). The orders a shop holds are of reservations
// confirmed or pending when it counted, which Redis, read after the count,
// holds as confirmed or pending still (or released since). Beyond those,
// less the units verify said absent, an order is one verify denied: it is
// wrong (a wrong path or host), alert verify_untrusted. Within them,
// younger pending reservations the shop holds (their answers in flight, or
// lost, not yet stale) may be all it counted: nothing says verify is wrong
// (review rv17: a true 404 was alerted as a wrong verify.url whenever a
// younger buy's answer was on its way), a note; the next pass, once any of
// them is confirmed, checks verify against it.
func (r *Reconciler) countOverConfirmed(ctx context.Context, ar *ActivityReport, a *config.Activity, vt *verifyTrust, over map[string]int64) error {
	if len(over) == 0 {
		return nil
	}
	// A bundle verify said absent is denied too (review rv18: its pending
	// units counted among the others hid a single buy's order verify
	// denied, a wrong verify.url noted on every pass).
	denied := vt.denied
	st, err := r.st.Status(ctx, a)
	if err != nil {
		return err
	}
	for _, k := range st.SKUs {
		n, ok := over[k.ID]
		if !ok {
			continue
		}
		others := k.Confirmed + k.Pending - denied[k.ID]
		if n > others {
			r.alert(ar, "verify_untrusted", fmt.Sprintf("count_url says the shop holds %d unit(s) of sku %s in orders, more than the %d Redis holds confirmed or pending besides the %d verify.url answered 404 for: verify.url answered 404 for a reservation the shop holds (a wrong path or host in verify.url?); nothing of the SKU is released on its word until it answers 200 for a confirmed order", n, k.ID, others, denied[k.ID]))
			continue
		}
		ar.Notes = append(ar.Notes, fmt.Sprintf("sku %s: count_url says the shop holds %d unit(s) in orders while Redis confirmed %d; %d more are pending (younger, or not settled), so verify.url's 404 for %d unit(s) can be neither believed nor refuted: left until a pass finds a confirmed reservation to check verify.url against", k.ID, n, k.Confirmed, others-k.Confirmed, denied[k.ID]))
	}
	return nil
}

// trustVerify says why the activity's verify.url may not be taken at its
// word that an order is absent ("" when it may). A 404 for every token
// (a wrong path: the shop's router answers it) would release every stale
// reservation, the ones the shop holds orders for too, and sell their
// units again (red-team finding, TestVC15...). So verify is first asked
// about a reservation the shop confirmed: it must answer 200. With no
// confirmed reservation to ask about, verify.count_url decides after the
// pass (vt.byCount, settleByCount); without count_url, verify is taken at
// its word.
func (r *Reconciler) trustVerify(ctx context.Context, a *config.Activity, shards int, vt *verifyTrust) string {
	if vt.checked {
		return vt.problem
	}
	vt.checked = true
	res, ok, err := r.st.SampleConfirmed(ctx, a.ID, vt.skus, shards)
	switch {
	case err != nil:
		vt.problem = "a confirmed reservation to check verify.url against could not be read (" + err.Error() + "): nothing is released on its word this pass"
	case ok:
		switch v, _, detail := verifyOrder(ctx, r.http, a.Verify.URL, res.Token.String()); v {
		case OrderExists:
		case OrderAbsent:
			vt.problem = fmt.Sprintf("verify.url answered 404 for %s, a reservation the shop confirmed (order %q): it cannot be trusted to say an order is absent (a wrong path or host in verify.url?); nothing is released on its word until it answers 200 for a confirmed order", res.Token, res.OrderID)
		default:
			vt.problem = fmt.Sprintf("verify.url did not answer for %s, a reservation the shop confirmed (%s): nothing is released on its word this pass", res.Token, detail)
		}
	case a.Verify.CountURL != "":
		// Nothing confirmed to check verify against (none yet: the shop's
		// answers were lost, a 504 from its balancer each time; or none in
		// the sample). The shop's own count decides, after the pass
		// (settleByCount): its 404s are released only if the shop holds
		// no more orders of the SKU than Redis has confirmed (red-team
		// finding, TestVC16...).
		vt.byCount = true
	}
	return vt.problem
}

// trustExists says why the activity's verify.url may not be taken at its
// word that an order exists ("" when it may). A 200 for every token (a
// catch-all route, a login or index page served 200, a health page at a
// guessed path) confirmed reservations the shop never took: their units
// were never sold, their buyers told they bought, and without
// verify.count_url nothing said so (red-team finding, TestRV15...). So
// verify is first asked about a token no buyer was ever given, shaped as
// tok is (a shop that checks the form still looks it up): it must answer
// 404. preflight checks the same before the sale; this holds for a
// verify.url changed since, or a shop deployed since.
func (r *Reconciler) trustExists(ctx context.Context, a *config.Activity, tok store.Token, vt *verifyTrust) string {
	if vt.existsChecked {
		return vt.existsProblem
	}
	vt.existsChecked = true
	vt.existsProblem = unknownTokenProblem(ctx, r.http, a.Verify.URL, tok)
	return vt.existsProblem
}

// unknownTokenProblem asks verify (tmpl) about a token shaped as tok that
// no buyer was ever given, and says why its 200s may not be believed (""
// when it answers 404, as it must).
func unknownTokenProblem(ctx context.Context, client *http.Client, tmpl string, tok store.Token) string {
	made := tok.WithFreshID().String()
	switch v, _, detail := verifyOrder(ctx, client, tmpl, made); v {
	case OrderAbsent:
		return ""
	case OrderExists:
		return fmt.Sprintf("verify.url answered 200 for %s, a token no buyer was ever given: it cannot be trusted to say an order exists (a catch-all route, a login page, an API that answers 200 with its error in the body, a wrong path in verify.url?); nothing is confirmed on its word until it answers 404 for an unknown token", made)
	default:
		return fmt.Sprintf("verify.url did not answer for %s, a token no buyer was ever given (%s): nothing is confirmed on its word this time", made, detail)
	}
}

func actionOf(done string, code lua.Code, err error) (string, string) {
	if err != nil {
		return "left", err.Error()
	}
	switch code {
	case lua.OK:
		return done, ""
	case lua.Same, lua.Confirmed, lua.Released:
		return "left", "already " + strings.ToLower(code.String())
	case lua.Restamped:
		return "left", "re-stamped: sent again since verify was asked (a queue worker's takeover); left for that send to settle"
	}
	return "left", code.String()
}

// verifyOrder asks the shop's verify endpoint: 200 = the order exists, 404
// = it does not, anything else (or no answer) = unknown.
func verifyOrder(ctx context.Context, client *http.Client, tmpl, token string) (Verdict, string, string) {
	u := strings.ReplaceAll(tmpl, "{token}", url.QueryEscape(token))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Unverified, "", err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return Unverified, "", err.Error()
	}
	defer func() { _ = resp.Body.Close() }() // read (capped) below; a close error changes nothing
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		var v struct {
			OrderID json.RawMessage `json:"order_id"`
		}
		_ = json.Unmarshal(body, &v)
		return OrderExists, strings.Trim(string(v.OrderID), `"`), ""
	case http.StatusNotFound:
		return OrderAbsent, "", ""
	}
	return Unverified, "", fmt.Sprintf("verify answered %d", resp.StatusCode)
}

// LostSale says what the shop holds of a sale Redis has lost: a's window
// has opened, Redis holds none of its stock (not preheated, no preheat
// loading it), and verify.count_url counts orders of its SKUs. A Redis
// restarted without persistence, or keys evicted or deleted, leave exactly
// that, and a preheat then put every unit the shop had already sold on sale
// a second time, answering "created" (red team rtb). "" when the shop holds
// no order of a, when a is upcoming or its stock is loaded, once its keys
// were due to expire (end + key_ttl_after_end), for a shadow activity's
// copy (the shop takes a shadow run's orders itself), and without
// count_url: nothing tells a lost sale from a late first preheat then.
// Also, count_url or not, what a shadow run of a recorded the shop selling
// (its 2xx units by SKU): an activity gone live mid-day after one would
// otherwise load its configured stock beside those sales (red team rtf).
func (r *Reconciler) LostSale(ctx context.Context, a *config.Activity, now time.Time) (string, error) {
	if now.Before(a.Start) || now.UnixMilli() >= store.ExpireAt(a) ||
		a.IsShadowCopy() || a.IsShadow() || strings.HasSuffix(a.ID, config.ShadowSuffix) {
		return "", nil
	}
	rec, err := r.st.PreheatRecord(ctx, a.ID)
	if err != nil || rec.Ready || rec.Loading {
		return "", err
	}
	// Gone live mid-day after a shadow run: the shop sold units to the
	// shadowed buyers itself (no token, so count_url counts none), and
	// the configured stock loaded now would sell them again (red team rtf).
	sold, err := r.st.ShadowShopUnits(ctx, a.ID)
	if err != nil {
		return "", err
	}
	var shadowed []string
	for _, k := range a.SKUs {
		if n := sold[k.ID]; n > 0 {
			shadowed = append(shadowed, fmt.Sprintf("%d unit(s) of sku %s", n, k.ID))
		}
	}
	if len(shadowed) > 0 {
		return fmt.Sprintf("%s ran in shadow mode in this window and the shop answered 2xx for %s (seckill-proxy shadow-report): "+
			"set each SKU's stock to what is left to sell, then preheat --force",
			a.ID, strings.Join(shadowed, ", ")), nil
	}
	if a.Verify.CountURL == "" {
		return "", nil
	}
	var held []string
	for _, k := range a.SKUs {
		n, err := r.shopCount(ctx, a.Verify.CountURL, a.ID, k.ID)
		if err != nil {
			return "", fmt.Errorf("sku %s: %w", k.ID, err)
		}
		if n > 0 {
			held = append(held, fmt.Sprintf("%d unit(s) of sku %s", n, k.ID))
		}
	}
	if len(held) == 0 {
		return "", nil
	}
	return fmt.Sprintf("Redis holds no stock of %s, on sale since %s, but count_url says the shop holds %s in orders: Redis lost the sale (restarted without persistence? keys evicted or deleted?)",
		a.ID, a.Start.UTC().Format(time.RFC3339), strings.Join(held, ", ")), nil
}

// PreheatRefusal says why a plain preheat must not load a now: LostSale's
// finding, or, when count_url could not answer for a sale Redis holds no
// stock of, that nothing can tell it from a lost one. "" to go on; the
// error is store.ErrUnavailable's alone (Redis did not answer). The CLI's
// preheat and the admin API's print it, each followed by its own way to
// force the load.
func (r *Reconciler) PreheatRefusal(ctx context.Context, a *config.Activity, now time.Time) (string, error) {
	lost, err := r.LostSale(ctx, a, now)
	if errors.Is(err, store.ErrUnavailable) {
		return "", err
	}
	if err != nil {
		lost = fmt.Sprintf("Redis holds no stock of %s, on sale since %s, and verify.count_url could not say whether the shop holds orders of it (%v)", a.ID, a.Start.UTC().Format(time.RFC3339), err)
	}
	if lost == "" {
		return "", nil
	}
	return lost + "; loaded again, those units would be sold a second time", nil
}

// shopCount asks verify.count_url how many units the shop holds tokened
// orders for: 200 with {"count": N}.
func (r *Reconciler) shopCount(ctx context.Context, tmpl, act, sku string) (int64, error) {
	u := strings.NewReplacer("{activity}", url.QueryEscape(act), "{sku}", url.QueryEscape(sku)).Replace(tmpl)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }() // read (capped) below; a close error changes nothing
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("count_url answered %d", resp.StatusCode)
	}
	var v struct {
		Count json.Number `json:"count"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, fmt.Errorf("count_url body: %w", err)
	}
	n, err := strconv.ParseInt(v.Count.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count_url: count %q is not an integer", v.Count)
	}
	return n, nil
}

// instanceName names this process among the fleet (lease holder, stream
// consumer): host, pid and start time, so a restarted process is new.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
}

// unitsOf is what a stale reservation holds, by SKU: its own SKU's qty,
// or a bundle's items (its total under store.BundleSKU when the items
// cannot be read).
func (r *Reconciler) unitsOf(ctx context.Context, skuID string, res store.Reservation, shards int) []store.BundleItem {
	if skuID == store.BundleSKU {
		if items, err := r.st.BundleItems(ctx, res.Token, shards); err == nil && len(items) > 0 {
			return items
		}
	}
	return []store.BundleItem{{SKU: skuID, Qty: res.Qty}}
}
