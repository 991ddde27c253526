package reservation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// A SKU dropped from the config after preheat still holds reservations:
// a repairing pass settles them with the activity's verify.url and names
// the SKU; its counters are reported (NotInConfig).
func TestReconcileSettlesDroppedSKU(t *testing.T) {
	sh := newShop(t)
	a := newActivity("dsku", 5, 2)
	a.SKUs = append(a.SKUs, config.SKU{ID: "gone", Stock: 5})
	a.Verify.URL = sh.srv.URL + "/internal/orders?token={token}"
	st, _ := setup(t, a)
	r, err := st.Reserve(tctx(t), store.ReserveRequest{Activity: a.ID, SKU: "gone", User: "u1", Qty: 1, Limit: 1, Shards: 2,
		NowMs: time.Now().Add(-time.Hour).UnixMilli(), ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	b := *a
	b.SKUs = b.SKUs[:1]
	rc, _ := newReconciler(st)
	rep, err := rc.Run(tctx(t), []*config.Activity{&b}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ar := rep.Activities[0]
	if len(ar.Stale) != 1 || ar.Stale[0].Token != r.Token.String() || ar.Stale[0].Action != "released" {
		t.Errorf("stale findings %+v: want %s released (the shop has no order)", ar.Stale, r.Token)
	}
	if !strings.Contains(strings.Join(ar.Notes, "\n"), "sku gone: not in the config") {
		t.Errorf("notes %q: want the dropped SKU named", ar.Notes)
	}
	if len(ar.SKUs) != 2 || ar.SKUs[1].ID != "gone" || !ar.SKUs[1].NotInConfig || ar.SKUs[1].Pending != 0 || ar.SKUs[1].Remaining != 5 || !ar.SKUs[1].OK {
		t.Errorf("sku reports %+v: want gone, not in the config, 5 remaining, nothing pending", ar.SKUs)
	}
	if rep.Alerting() {
		t.Errorf("alerts %v: a settled dropped SKU needs no person", ar.Alerts)
	}
}

// An activity dropped from the config whose reservations are pending is
// reported by Dropped, with its tokens, as an alert (nothing can ask its
// shop); one with nothing pending is not reported at all.
func TestReconcileReportsDroppedActivity(t *testing.T) {
	a := newActivity("dact", 5, 2)
	st, _ := setup(t, a)
	quiet := newActivity("dquiet", 5, 1)
	if _, err := st.Preheat(tctx(t), quiet, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	tok := reserve(t, st, a, "u1", time.Now().Add(-time.Hour).UnixMilli(), false)
	keep := newActivity("kept", 5, 1)
	rc, _ := newReconciler(st)
	reps, err := rc.Dropped(tctx(t), []*config.Activity{keep}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].ID != a.ID {
		t.Fatalf("Dropped = %+v, want only %s (dquiet has nothing pending)", reps, a.ID)
	}
	ar := reps[0]
	if len(ar.Stale) != 1 || ar.Stale[0].Token != tok.String() || ar.Stale[0].Action != "left" ||
		len(ar.Alerts) != 1 || !strings.Contains(ar.Alerts[0], "activity dact is not in the config") {
		t.Errorf("report %+v: want %s listed, left, and an alert naming dact", ar, tok)
	}
	if k := status(t, st, a); k.Pending != 1 {
		t.Errorf("Dropped changed the stock: %+v", k)
	}
	if reps, err := rc.Dropped(tctx(t), []*config.Activity{a, quiet}, time.Now()); err != nil || len(reps) != 0 {
		t.Errorf("Dropped with every activity configured = %+v, %v", reps, err)
	}
}
