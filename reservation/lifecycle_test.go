package reservation_test

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// A reservation is released once: a replay changes nothing, the release
// keeps its reason and time, stock never goes above initial, and the buyer
// may buy again.
func TestDoubleRelease(t *testing.T) {
	a := newActivity("dbl", 3, 1)
	st, _ := setup(t, a)
	tok := reserve(t, st, a, "u1", time.Now().UnixMilli(), false)
	if code, err := st.Confirm(tctx(t), tok, 1, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("confirm: %v %v", code, err)
	}
	for i, want := range []lua.Code{lua.OK, lua.Same, lua.Same} {
		code, err := st.Release(tctx(t), tok, 1, "refund", 1234, false)
		if err != nil || code != want {
			t.Fatalf("release #%d = %v, %v; want %v", i+1, code, err, want)
		}
	}
	s := status(t, st, a)
	if !s.OK || s.Remaining != 3 || s.Confirmed != 0 || s.Released != 1 {
		t.Fatalf("status after double release: %+v", s)
	}
	r, ok, err := st.Lookup(tctx(t), tok, 1)
	if err != nil || !ok || r.State != store.StateReleased || r.Reason != "refund" || r.ReleasedMs != 1234 || r.OrderID != "O-1" {
		t.Fatalf("record after release: %+v ok=%v err=%v", r, ok, err)
	}
	// Released: the same buyer may buy again, within the limit.
	tok2 := reserve(t, st, a, "u1", time.Now().UnixMilli(), false)
	if tok2 == tok {
		t.Fatal("a new reservation reused the old token")
	}
	if code, _ := st.Confirm(tctx(t), tok, 1, "O-9"); code != lua.Released {
		t.Fatalf("confirm of a released reservation = %v, want RELEASED", code)
	}
}

// Confirm and release racing on the same tokens from many goroutines:
// each reservation ends in exactly one state and the counters add up.
func TestConfirmReleaseRace(t *testing.T) {
	const n = 400
	a := newActivity("race", n, 4)
	a.PerUserLimit = 1
	st, _ := setup(t, a)
	toks := make([]store.Token, n)
	now := time.Now().UnixMilli()
	for i := range toks {
		toks[i] = reserve(t, st, a, "u"+strconv.Itoa(i), now, false)
	}
	var confirms, pendRel, anyRel atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i, tok := range toks {
				var code lua.Code
				var err error
				switch (i + g) % 4 {
				case 0, 1:
					code, err = st.Confirm(tctx(t), tok, a.Shards, "O-"+strconv.Itoa(i))
					if code == lua.OK {
						confirms.Add(1)
					}
				case 2:
					code, err = st.Release(tctx(t), tok, a.Shards, "shop_status_500", now, true)
					if code == lua.OK {
						pendRel.Add(1)
					}
				case 3:
					if i%3 == 0 { // some refunds: confirmed -> released is allowed
						code, err = st.Release(tctx(t), tok, a.Shards, "refund", now, false)
						if code == lua.OK {
							anyRel.Add(1)
						}
					}
				}
				if err != nil {
					t.Errorf("%v: %v", tok, err)
				}
				if code == lua.Broken {
					t.Errorf("%v: BROKEN", tok)
				}
			}
		}(g)
	}
	wg.Wait()
	s := status(t, st, a)
	if !s.OK {
		t.Fatalf("invariant broken: %+v", s)
	}
	// Count final states from the records themselves.
	var conf, rel, pend int64
	for _, tok := range toks {
		r, ok, err := st.Lookup(tctx(t), tok, a.Shards)
		if err != nil || !ok {
			t.Fatalf("lookup %v: %v %v", tok, ok, err)
		}
		switch r.State {
		case store.StateConfirmed:
			conf++
		case store.StateReleased:
			rel++
		default:
			pend++
		}
	}
	if conf != s.Confirmed || rel != s.Released || pend != s.Pending || conf+rel+pend != n {
		t.Fatalf("records confirmed %d released %d pending %d vs status %+v", conf, rel, pend, s)
	}
	// Each release moved one unit; refunds of confirmed ones undid confirms
	// (a refund may also have hit a still-pending one).
	undone := confirms.Load() - s.Confirmed
	if pendRel.Load()+anyRel.Load() != s.Released || undone < 0 || undone > anyRel.Load() {
		t.Fatalf("transitions: confirms %d pending releases %d refunds %d vs %+v", confirms.Load(), pendRel.Load(), anyRel.Load(), s)
	}
	if s.Remaining != s.Released || s.Remaining > s.Initial {
		t.Fatalf("remaining %d, released %d (sold out before releases)", s.Remaining, s.Released)
	}
}

// Without verify the reconciler reports stale reservations and changes
// nothing, even with repair.
func TestReconcileWithoutVerifyChangesNothing(t *testing.T) {
	a := newActivity("nover", 10, 2)
	st, _ := setup(t, a)
	old := time.Now().Add(-time.Minute).UnixMilli()
	for i := 0; i < 3; i++ {
		reserve(t, st, a, "u"+strconv.Itoa(i), old, false)
	}
	before := status(t, st, a)
	rec, _ := newReconciler(st)
	for _, repair := range []bool{false, true} {
		rep, err := rec.Run(tctx(t), []*config.Activity{a}, repair, time.Now())
		if err != nil {
			t.Fatalf("run(repair=%v): %v", repair, err)
		}
		ar := rep.Activities[0]
		if len(ar.Stale) != 3 {
			t.Fatalf("stale = %d, want 3", len(ar.Stale))
		}
		for _, f := range ar.Stale {
			if f.Action != "left" || f.Verdict != reservation.Unverified {
				t.Fatalf("finding %+v: want left/unknown", f)
			}
		}
		// 3 units unsettled while running, within tolerance 5: noted, no alert.
		if ar.SKUs[0].Unsettled != 3 || len(ar.Notes) != 1 || rep.Alerting() {
			t.Fatalf("report: %+v", ar)
		}
	}
	if after := status(t, st, a); after != before {
		t.Fatalf("status changed: %+v -> %+v", before, after)
	}
}

// With verify, stale reservations are confirmed (order exists) or released
// (absent); other answers are left; a shop count below confirmed alerts.
func TestReconcileVerifyAndGrade(t *testing.T) {
	a := newActivity("ver", 10, 2)
	st, _ := setup(t, a)
	sh := newShop(t)
	a.Verify.URL = sh.srv.URL + "/internal/orders?token={token}"
	a.Verify.CountURL = sh.srv.URL + "/internal/count?sku={sku}"
	old := time.Now().Add(-time.Minute).UnixMilli()
	exists := reserve(t, st, a, "u1", old, false)
	absent := reserve(t, st, a, "u2", old, false)
	fresh := reserve(t, st, a, "u3", time.Now().UnixMilli(), false)
	sh.orders[exists.String()] = "O-77"

	rec, m := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rep); got[exists.String()] != "would-confirm" || got[absent.String()] != "would-release" || len(got) != 2 {
		t.Fatalf("report-only actions: %v", got)
	}
	rep, err = rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rep); got[exists.String()] != "confirmed" || got[absent.String()] != "released" {
		t.Fatalf("repair actions: %v", got)
	}
	s := rep.Activities[0].SKUs[0]
	if s.Confirmed != 1 || s.Pending != 1 || s.Released != 1 || s.ShopCount == nil || *s.ShopCount != 1 || rep.Alerting() {
		t.Fatalf("after repair: %+v alerts %v", s, rep.Activities[0].Alerts)
	}
	if r, _, _ := st.Lookup(tctx(t), exists, a.Shards); r.OrderID != "O-77" {
		t.Fatalf("order id %q", r.OrderID)
	}
	_ = fresh

	// The shop loses an order Redis confirmed. Within tolerance while the
	// activity runs: noted; one hour after the end: alert.
	delete(sh.orders, exists.String())
	rep, _ = rec.Run(tctx(t), []*config.Activity{a}, false, time.Now())
	if rep.Alerting() || len(rep.Activities[0].Notes) == 0 {
		t.Fatalf("running: want a note, got %+v", rep.Activities[0])
	}
	rep, _ = rec.Run(tctx(t), []*config.Activity{a}, false, a.End.Add(reservation.Grace+time.Minute))
	if !rep.Alerting() {
		t.Fatalf("closed: want an alert, got %+v", rep.Activities[0])
	}
	var d dto.Metric
	_ = m.ReconcileAlerts.WithLabelValues(a.ID, "shop_missing").Write(&d)
	if n := d.GetCounter().GetValue(); n < 1 {
		t.Fatalf("alert metric = %v", n)
	}
	// Orders the shop holds beyond confirmed+pending: Redis holds more
	// than it should: alert, never fixed automatically.
	sh.orders["x1"], sh.orders["x2"], sh.orders["x3"] = "X1", "X2", "X3"
	rep, _ = rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if !rep.Alerting() {
		t.Fatalf("shop extra: want an alert, got %+v", rep.Activities[0])
	}
}

func actions(rep reservation.Report) map[string]string {
	out := map[string]string{}
	for _, a := range rep.Activities {
		for _, f := range a.Stale {
			out[f.Token] = f.Action
		}
	}
	return out
}

// Only one repairing reconciler at a time, and a holder that lost the
// lease cannot repair: the shards refuse its older fencing token.
func TestLeaseAndFencing(t *testing.T) {
	a := newActivity("fence", 10, 2)
	st, _ := setup(t, a)
	l1, err := st.AcquireLease(tctx(t), reservation.LeaseName, "old", 100*time.Millisecond)
	if err != nil || !l1.Held {
		t.Fatalf("first lease: %+v %v", l1, err)
	}
	rec, _ := newReconciler(st)
	if _, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now()); !errors.Is(err, reservation.ErrLeaseHeld) {
		t.Fatalf("second reconciler while the lease is held: %v", err)
	}
	// The old holder pauses; its lease expires and a new one repairs.
	time.Sleep(150 * time.Millisecond)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if err != nil || rep.Fence <= l1.Token {
		t.Fatalf("new holder: fence %d (old %d), %v", rep.Fence, l1.Token, err)
	}
	// The old holder wakes up and tries to repair with its old token.
	tok := reserve(t, st, a, "u1", time.Now().UnixMilli(), false)
	f := store.Fence{Token: l1.Token, ExpireAt: store.ExpireAt(a)}
	if code, err := st.ReleaseFenced(tctx(t), tok, a.Shards, "verify_absent", 0, true, 0, f); err != nil || code != lua.Fenced {
		t.Fatalf("stale holder's release = %v, %v; want FENCED", code, err)
	}
	if code, err := st.ConfirmFenced(tctx(t), tok, a.Shards, "", f); err != nil || code != lua.Fenced {
		t.Fatalf("stale holder's confirm = %v, %v; want FENCED", code, err)
	}
	if s := status(t, st, a); s.Pending != 1 {
		t.Fatalf("fenced repairs changed stock: %+v", s)
	}
	// The current token passes.
	cur := store.Fence{Token: rep.Fence, ExpireAt: store.ExpireAt(a)}
	if code, err := st.ReleaseFenced(tctx(t), tok, a.Shards, "verify_absent", 0, true, 0, cur); err != nil || code != lua.OK {
		t.Fatalf("current holder's release = %v, %v", code, err)
	}
	// The lease is given back after a pass: the next one needs no wait.
	if l, err := st.AcquireLease(tctx(t), reservation.LeaseName, "other", time.Second); err != nil || !l.Held || l.Token <= rep.Fence {
		t.Fatalf("lease after the pass: %+v %v", l, err)
	}
}
